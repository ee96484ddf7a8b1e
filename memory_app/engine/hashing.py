"""A deterministic embedder with no model: signed feature hashing of words.

Contract: ``HashingEmbedder(dimensions).encode(texts)`` returns one float32 row
per text, L2-normalised, built from the lowercase word unigrams and adjacent
word bigrams of the text. Each feature lands in a bucket chosen by blake2b (not
Python's salted ``hash``), with a sign from the same digest so collisions
cancel out on average: the same text gives the same vector in every process,
on every machine. A text with no words encodes to the zero vector.

It knows nothing of meaning (``cat`` and ``kitten`` share nothing), only of
shared words. Tests use it for speed, and ``memory_app.embedding`` falls back to
it when the real model cannot load.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from memory_app.engine.types import Matrix
from memory_app.engine.vectors import normalise_rows

_WORD = re.compile(r"[^\W_]+")
_BIGRAM_WEIGHT = 0.5  # a shared bigram is evidence, but the words carry the topic


@lru_cache(maxsize=65_536)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    sign = 1.0 if value >> 63 == 0 else -1.0
    return value % dimensions, sign


class HashingEmbedder:
    """Feature-hashing embedder that satisfies the ``Embedder`` protocol."""

    def __init__(self, dimensions: int = 384, *, model_name: str | None = None) -> None:
        if dimensions < 8:
            raise ValueError("dimensions must be at least 8")
        self.dimensions = dimensions
        self.model_name = model_name or f"hashing-{dimensions}"

    def encode(self, texts: Sequence[str]) -> Matrix:
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            self._fill(matrix[row], text)
        return normalise_rows(matrix)

    def _fill(self, row: Matrix, text: str) -> None:
        words = _WORD.findall(text.lower())
        for word in words:
            index, sign = _bucket(word, self.dimensions)
            row[index] += sign
        for left, right in zip(words, words[1:], strict=False):
            index, sign = _bucket(f"{left} {right}", self.dimensions)
            row[index] += sign * _BIGRAM_WEIGHT
