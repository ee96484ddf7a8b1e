from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.types import Embedder


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_rows_are_unit_float32_vectors() -> None:
    embedder: Embedder = HashingEmbedder(dimensions=384)
    matrix = embedder.encode(["the cat sat on the mat", "Postgres index", "x"])
    assert matrix.dtype == np.float32
    assert matrix.shape == (3, 384)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-6)
    assert embedder.model_name == "hashing-384"


def test_same_text_gives_the_same_vector() -> None:
    a = HashingEmbedder().encode(["Database migrations in Django"])
    b = HashingEmbedder().encode(["Database migrations in Django"])
    assert np.array_equal(a, b)


def test_vectors_do_not_depend_on_the_process_hash_seed() -> None:
    script = (
        "from memory_app.engine.hashing import HashingEmbedder;"
        "print(HashingEmbedder(64).encode(['postgres index bloat']).tobytes().hex())"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout.strip())
    assert len(outputs) == 1
    here = HashingEmbedder(64).encode(["postgres index bloat"]).tobytes().hex()
    assert outputs == {here}


def test_shared_words_bring_texts_closer() -> None:
    a, b, c = HashingEmbedder().encode(
        ["postgres index is bloated", "rebuild the postgres index", "a vegetarian pasta recipe"]
    )
    assert _cosine(a, b) > _cosine(a, c)


def test_case_and_punctuation_do_not_matter() -> None:
    a, b = HashingEmbedder().encode(["Postgres, Index!", "postgres index"])
    assert _cosine(a, b) == pytest.approx(1.0)


def test_word_order_changes_the_bigrams() -> None:
    a, b = HashingEmbedder().encode(["dog bites man", "man bites dog"])
    assert 0.5 < _cosine(a, b) < 1.0


def test_text_without_words_is_the_zero_vector() -> None:
    [row] = HashingEmbedder().encode(["  ... !!"])
    assert not row.any()
    assert HashingEmbedder().encode([]).shape == (0, 384)


def test_dimensions_must_be_usable() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        HashingEmbedder(dimensions=2)
