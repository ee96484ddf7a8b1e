from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from memory_app import embedding
from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.types import Matrix


def test_real_model_puts_paraphrases_closer_than_unrelated_text() -> None:
    model = embedding.minilm_embedder()  # the one load of the real model in the suite
    assert model.model_name == embedding.MINILM_NAME
    assert model.dimensions == 384
    cat, kitten, tax = model.encode(
        ["the cat sat on the mat", "a kitten rests on a rug", "quarterly tax filing deadline"]
    )
    assert cat.dtype == np.float32
    assert np.linalg.norm(cat) == pytest.approx(1.0, abs=1e-5)
    assert float(cat @ kitten) > float(cat @ tax) + 0.2
    assert embedding.minilm_embedder() is model


def test_test_settings_select_the_hashing_embedder() -> None:
    assert isinstance(embedding.embedder(), HashingEmbedder)


def test_unknown_embedder_setting_is_refused(settings) -> None:  # type: ignore[no-untyped-def]
    settings.VC_EMBEDDER = "word2vec"
    with pytest.raises(ImproperlyConfigured, match="VC_EMBEDDER"):
        embedding.embedder()


class _CountingEmbedder:
    """The hashing embedder, counting the texts it is asked to encode."""

    def __init__(self) -> None:
        self._inner = HashingEmbedder(64)
        self.model_name = self._inner.model_name
        self.dimensions = self._inner.dimensions
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        return self._inner.encode(texts)


def test_embedding_cache_encodes_each_text_once_and_returns_the_same_vectors(
    tmp_path: Path,
) -> None:
    inner = _CountingEmbedder()
    cache = embedding.EmbeddingCache(inner, tmp_path)
    texts = ["the cat sat on the mat", "quarterly tax filing", "the cat sat on the mat"]

    first = cache.encode(texts)
    second = cache.encode(texts)
    # A new wrapper (another process, a later run) reads the same file.
    third = embedding.EmbeddingCache(inner, tmp_path).encode(["quarterly tax filing", "new"])

    assert inner.calls == [["the cat sat on the mat", "quarterly tax filing"], ["new"]]
    assert second.tobytes() == first.tobytes()
    np.testing.assert_array_equal(first, inner._inner.encode(texts))
    np.testing.assert_array_equal(third[0], first[1])
    assert first.dtype == np.float32
    assert first.shape == (3, 64)


def test_embedder_is_cached_only_when_a_cache_dir_is_set(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert not isinstance(embedding.embedder(), embedding.EmbeddingCache)
    settings.VC_EMBED_CACHE_DIR = str(tmp_path)
    cached = embedding.embedder()
    assert isinstance(cached, embedding.EmbeddingCache)
    assert cached.model_name == embedding.embedder().model_name
    assert (tmp_path / embedding.CACHE_FILE).exists()
