"""Latency of the inbound tagger with the real embedder.

``run(n)`` loads the process-wide embedder (all-MiniLM-L6-v2 unless it fails to
load: ``model_name`` in the result says which), builds the matrix of a 60-tag
vocabulary once, as the per-conversation cache would, then times ``n`` calls
of ``InboundTagger.tags_for`` on short chat messages. The one-time costs (model
load, first encode, matrix build) are reported apart from the per-call figures,
and ``encode_only_p50_ms`` times the bare model call on the same messages, so
the tagger's own share is the difference. The target is a p50 of at most 15 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from memory_app.embedding import minilm_embedder
from memory_app.engine.inbound import InboundTagger, vocab_matrix_build

TARGET_P50_MS = 15.0


VOCABULARY = [
    "postgres",
    "database",
    "database-migration",
    "database-index",
    "query-performance",
    "django",
    "django-orm",
    "celery",
    "redis",
    "caching",
    "docker",
    "kubernetes",
    "deployment",
    "ci-pipeline",
    "github-actions",
    "testing",
    "pytest",
    "python",
    "typescript",
    "react",
    "css",
    "authentication",
    "oauth",
    "api-design",
    "rate-limiting",
    "logging",
    "monitoring",
    "error-handling",
    "async",
    "websocket",
    "performance",
    "memory-leak",
    "security",
    "encryption",
    "backup",
    "travel",
    "berlin",
    "lisbon",
    "flight",
    "hotel",
    "budget",
    "visa",
    "packing",
    "cooking",
    "pasta",
    "baking",
    "vegetarian",
    "meal-plan",
    "grocery",
    "fitness",
    "running",
    "marathon",
    "hiking",
    "sleep",
    "nutrition",
    "finance",
    "tax",
    "investment",
    "mortgage",
    "salary",
]

MESSAGES = [
    "ok do that",
    "how do I add an index to the users table?",
    "the migration failed with a lock timeout",
    "can you make the celery task retry on failure",
    "what's a good hotel near the old town in Lisbon?",
    "my flight lands at 7am, is that enough time?",
    "I want a vegetarian pasta recipe for four people",
    "why is this query so slow on postgres",
    "set up a github action that runs pytest",
    "my marathon training plan needs more rest days",
    "should I pay off the mortgage or invest?",
    "the websocket disconnects every few minutes",
    "thanks, that worked",
    "how much should I budget for a week in Berlin",
    "is redis a good fit for rate limiting",
    "the react component re-renders too often",
    "what's the deadline for the tax return",
    "explain oauth refresh tokens briefly",
    "pack light: what do I need for three days",
    "the container keeps running out of memory",
]


def run(n: int = 200) -> dict[str, Any]:
    """Figures in milliseconds (``load_s`` in seconds); see the module docstring."""
    started = time.perf_counter()
    embedder = minilm_embedder()
    load_s = time.perf_counter() - started  # 0 when this process had already loaded it

    started = time.perf_counter()
    embedder.encode(["warm up the model"])
    first_encode_ms = (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    matrix = vocab_matrix_build(VOCABULARY, embedder)
    matrix_ms = (time.perf_counter() - started) * 1000

    tagger = InboundTagger()
    tagged = _time_calls(lambda m: tagger.tags_for(m, VOCABULARY, matrix, embedder), n)
    encoded = _time_calls(lambda m: embedder.encode([m]), n)
    p50 = float(np.percentile(tagged, 50))
    return {
        "model_name": embedder.model_name,
        "dimensions": embedder.dimensions,
        "vocabulary": len(VOCABULARY),
        "calls": n,
        "load_s": round(load_s, 3),
        "first_encode_ms": round(first_encode_ms, 2),
        "matrix_build_ms": round(matrix_ms, 2),
        "p50_ms": round(p50, 2),
        "p95_ms": round(float(np.percentile(tagged, 95)), 2),
        "mean_ms": round(float(tagged.mean()), 2),
        "max_ms": round(float(tagged.max()), 2),
        "encode_only_p50_ms": round(float(np.percentile(encoded, 50)), 2),
        "target_p50_ms": TARGET_P50_MS,
        "within_target": p50 <= TARGET_P50_MS,
    }


def _time_calls(call: Callable[[str], object], n: int) -> npt.NDArray[np.float64]:
    """Milliseconds per call, cycling through the sample messages."""
    timings = []
    for i in range(n):
        message = MESSAGES[i % len(MESSAGES)]
        started = time.perf_counter()
        call(message)
        timings.append((time.perf_counter() - started) * 1000)
    return np.asarray(timings, dtype=np.float64)
