from __future__ import annotations

import numpy as np
import pytest

from memory_app.engine.vectors import normalise_rows, vector_from_bytes, vector_to_bytes


def test_vector_round_trips_through_bytes() -> None:
    v = np.asarray([0.5, -1.25, 3.0, 0.0], dtype=np.float32)
    blob = vector_to_bytes(v)
    assert len(blob) == 16
    back = vector_from_bytes(blob, 4)
    assert back.dtype == np.float32
    assert np.array_equal(back, v)
    back[0] = 9.0  # a writeable copy, not a view on the bytes


def test_bytes_are_little_endian_float32_whatever_the_input_dtype() -> None:
    blob = vector_to_bytes(np.asarray([1.0], dtype=">f8"))
    assert blob == np.asarray([1.0], dtype="<f4").tobytes()


def test_wrong_length_blob_is_refused() -> None:
    with pytest.raises(ValueError, match="bytes"):
        vector_from_bytes(b"\x00" * 12, 4)


def test_only_one_dimensional_vectors_are_stored() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        vector_to_bytes(np.zeros((2, 2), dtype=np.float32))


def test_normalise_rows_leaves_zero_rows_at_zero() -> None:
    rows = normalise_rows(np.asarray([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32))
    assert np.allclose(rows, [[0.6, 0.8], [0.0, 0.0]])
    assert rows.dtype == np.float32
