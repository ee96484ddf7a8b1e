"""The inbound tagger: which existing tags a new message is about, on the request path.

Contract: ``InboundTagger().tags_for(message, vocab_names, vocab_matrix, embedder)``
returns at most ``k`` ``(tag, score)`` pairs, best first (ties by name), drawn
only from ``vocab_names``: it never invents a tag. The score is the cosine
between the message's embedding and the tag's row of ``vocab_matrix`` (rows
aligned with ``vocab_names``, unit length: build it with ``vocab_matrix_build``
and cache it per conversation). A tag whose name appears in the message as
words (after plural folding: "my databases" names ``database``, "database
migration" names ``database-migration``) gets ``lexical_boost`` added and is
returned even below ``threshold``; any other tag must reach ``threshold``.

Cost: one ``encode`` of one message plus a matrix-vector product; the lexical
check is a set lookup per tag. A caller that has already embedded the message
(the planner embeds the query for retrieval) passes ``vector`` and the encode
is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from memory_app.engine.canon import tag_fold, text_words, word_fold
from memory_app.engine.types import Embedder, Matrix

MAX_NGRAM = 4


def tag_text(name: str, description: str = "") -> str:
    """What gets embedded for a tag: its words, then its description if any."""
    words = name.replace("-", " ")
    return f"{words}: {description.strip()}" if description.strip() else words


def vocab_matrix_build(
    names: Sequence[str], embedder: Embedder, descriptions: Mapping[str, str] | None = None
) -> Matrix:
    """One unit row per name, in order, for ``InboundTagger.tags_for``."""
    described = descriptions or {}
    if not names:
        return np.zeros((0, embedder.dimensions), dtype=np.float32)
    return embedder.encode([tag_text(name, described.get(name, "")) for name in names])


@lru_cache(maxsize=8192)
def _folded(name: str) -> str:
    return tag_fold(name)


def message_phrases(message: str, max_words: int = MAX_NGRAM) -> set[str]:
    """Every run of up to ``max_words`` consecutive words, folded and hyphen-joined."""
    words = [word_fold(w) for w in text_words(message)]
    return {
        "-".join(words[i : i + n])
        for n in range(1, max_words + 1)
        for i in range(len(words) - n + 1)
    }


class InboundTagger:
    """Closed-set tagging of one message against a conversation's vocabulary."""

    def __init__(self, lexical_boost: float = 0.25) -> None:
        self.lexical_boost = lexical_boost

    def tags_for(
        self,
        message: str,
        vocab_names: list[str],
        vocab_matrix: Matrix,
        embedder: Embedder,
        k: int = 3,
        threshold: float = 0.35,
        vector: npt.ArrayLike | None = None,
    ) -> list[tuple[str, float]]:
        if vocab_matrix.shape[0] != len(vocab_names):
            raise ValueError(
                f"vocab_matrix has {vocab_matrix.shape[0]} rows for {len(vocab_names)} names"
            )
        if k <= 0 or not vocab_names or not message.strip():
            return []
        query = embedder.encode([message])[0] if vector is None else np.asarray(vector)
        similarity = vocab_matrix @ query
        longest = min(MAX_NGRAM, max(name.count("-") + 1 for name in vocab_names))
        named = message_phrases(message, longest)
        scored: list[tuple[str, float]] = []
        for index, name in enumerate(vocab_names):
            score = float(similarity[index])
            if _folded(name) in named:
                scored.append((name, score + self.lexical_boost))
            elif score >= threshold:
                scored.append((name, score))
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return scored[:k]
