"""Per-conversation locks: a second holder waits, then times out."""

from __future__ import annotations

import threading

import pytest

from memory_app.errors import LockTimeout
from memory_app.locks import conversation_lock

pytestmark = pytest.mark.django_db(transaction=True)


def _try(conversation_id: int, result: list[str]) -> None:
    from django.db import connection

    try:
        with conversation_lock(conversation_id, wait=0.3):
            result.append("got it")
    except LockTimeout:
        result.append("timed out")
    finally:
        connection.close()


def test_a_held_lock_keeps_another_worker_out_until_released():
    result: list[str] = []
    with conversation_lock(41):
        other = threading.Thread(target=_try, args=(41, result))
        other.start()
        other.join()
        assert result == ["timed out"]
        # A different conversation is not blocked.
        free = threading.Thread(target=_try, args=(42, result))
        free.start()
        free.join()
        assert result == ["timed out", "got it"]
    after = threading.Thread(target=_try, args=(41, result))
    after.start()
    after.join()
    assert result[-1] == "got it"
