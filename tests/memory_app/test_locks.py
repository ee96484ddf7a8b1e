"""Per-conversation locks: a second holder waits, then times out."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from memory_app.errors import LockTimeout
from memory_app.locks import conversation_lock, session_lock

pytestmark = pytest.mark.django_db(transaction=True)


def _try(lock: Callable[[], AbstractContextManager[None]], result: list[str]) -> None:
    """Take ``lock()`` from another thread's point of view: got it, or timed out."""
    from django.db import connection

    try:
        with lock():
            result.append("got it")
    except LockTimeout:
        result.append("timed out")
    finally:
        connection.close()


def _conversation(conversation_id: int) -> Callable[[], AbstractContextManager[None]]:
    return lambda: conversation_lock(conversation_id, wait=0.3)


def _session(account_id: int, session_id: str) -> Callable[[], AbstractContextManager[None]]:
    return lambda: session_lock(account_id, session_id, wait=0.3)


def test_a_held_lock_keeps_another_worker_out_until_released():
    result: list[str] = []
    with conversation_lock(41):
        other = threading.Thread(target=_try, args=(_conversation(41), result))
        other.start()
        other.join()
        assert result == ["timed out"]
        # A different conversation is not blocked.
        free = threading.Thread(target=_try, args=(_conversation(42), result))
        free.start()
        free.join()
        assert result == ["timed out", "got it"]
    after = threading.Thread(target=_try, args=(_conversation(41), result))
    after.start()
    after.join()
    assert result[-1] == "got it"


def test_a_session_lock_is_per_account_and_session_id():
    result: list[str] = []
    with session_lock(7, "agent-1"):
        for args in ((7, "agent-1"), (7, "agent-2"), (8, "agent-1")):
            other = threading.Thread(target=_try, args=(_session(*args), result))
            other.start()
            other.join()
    assert result == ["timed out", "got it", "got it"]


def test_racing_first_requests_of_a_session_make_one_conversation(account):
    from django.db import connection

    from memory_app.models import Conversation
    from proxy_app.services import conversation_for_session
    from tests import factories

    key, _ = factories.vckey_for(account)
    start = threading.Barrier(4)
    found: list[int] = []

    def first_request() -> None:
        try:
            start.wait()
            row = conversation_for_session(
                account_id=account.pk,
                key_id=key.pk,
                session_id="parallel-agent",
                format="anthropic",
                model="m",
            )
            found.append(row.id)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_request) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4
    assert len(set(found)) == 1
    assert Conversation.objects.filter(account=account, session_id="parallel-agent").count() == 1
