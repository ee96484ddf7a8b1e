"""Per-conversation locks: two workers never process one conversation at once.

PostgreSQL: a session-level advisory lock on the conversation id (held on the
worker's own connection). Otherwise, with ``REDIS_URL``: a Redis lock with a
timeout, so a crashed worker cannot hold it forever. Embedded mode (SQLite, no
Redis): an ``flock`` on a file under ``VC_DATA_DIR/locks``, which also
serialises the web process and the writer process of one machine.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

from memory_app.errors import LockTimeout

_ADVISORY_NAMESPACE = 0x7663  # "vc": keeps our advisory keys apart from others'
LOCK_TTL = 600  # seconds a Redis lock survives a crashed holder


@contextmanager
def conversation_lock(conversation_id: int, *, wait: float = 300.0) -> Iterator[None]:
    """Hold the conversation's lock; raise ``LockTimeout`` after ``wait`` seconds."""
    if connection.vendor == "postgresql":
        with _advisory_lock(conversation_id, wait):
            yield
    elif settings.REDIS_URL:
        with _redis_lock(conversation_id, wait):
            yield
    else:
        with _file_lock(conversation_id, wait):
            yield


@contextmanager
def _advisory_lock(conversation_id: int, wait: float) -> Iterator[None]:
    deadline = time.monotonic() + wait
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", [_ADVISORY_NAMESPACE, conversation_id]
            )
            if cursor.fetchone()[0]:
                break
            if time.monotonic() > deadline:
                raise LockTimeout(conversation_id)
            time.sleep(0.05)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(%s, %s)", [_ADVISORY_NAMESPACE, conversation_id]
            )


@contextmanager
def _redis_lock(conversation_id: int, wait: float) -> Iterator[None]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(f"vc:lock:conversation:{conversation_id}", timeout=LOCK_TTL)
    if not lock.acquire(blocking=True, blocking_timeout=wait):
        raise LockTimeout(conversation_id)
    try:
        yield
    finally:
        lock.release()
        client.close()


@contextmanager
def _file_lock(conversation_id: int, wait: float) -> Iterator[None]:
    folder = settings.DATA_DIR / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    with (folder / f"conversation-{conversation_id}.lock").open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(conversation_id) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
