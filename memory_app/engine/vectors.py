"""Embedding vectors as stored bytes, and the row normalisation cosine needs.

Contract: a vector is stored as float32 little-endian bytes, ``4 * dims`` long,
whatever the machine's byte order. ``vector_from_bytes`` refuses a blob of the
wrong length rather than guessing, and returns a writeable native float32 copy.
``normalise_rows`` scales every row to unit length and leaves all-zero rows at
zero (an empty text has no direction), so a dot product is the cosine.
"""

from __future__ import annotations

import numpy as np

from memory_app.engine.types import Matrix, Vector

_STORED = np.dtype("<f4")


def vector_to_bytes(v: Vector) -> bytes:
    """The float32 little-endian bytes of a one-dimensional vector."""
    array = np.asarray(v)
    if array.ndim != 1:
        raise ValueError(f"expected a one-dimensional vector, got shape {array.shape}")
    return array.astype(_STORED, copy=False).tobytes()


def vector_from_bytes(b: bytes, dims: int) -> Vector:
    """The vector ``vector_to_bytes`` stored; ``dims`` must match the blob."""
    if len(b) != dims * _STORED.itemsize:
        raise ValueError(f"expected {dims * _STORED.itemsize} bytes for {dims} dims, got {len(b)}")
    return np.frombuffer(b, dtype=_STORED).astype(np.float32)


def normalise_rows(m: Matrix) -> Matrix:
    """Rows scaled to unit length; all-zero rows stay zero."""
    matrix = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    norms[norms == 0.0] = 1.0
    normalised: Matrix = (matrix / norms).astype(np.float32, copy=False)
    return normalised
