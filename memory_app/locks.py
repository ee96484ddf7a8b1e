"""Per-conversation locks: two workers never process one conversation at once;
per-session locks: two web workers never create one client session's
conversation twice (``session_lock``, held only around find-or-create).

PostgreSQL: a session-level advisory lock on the conversation id (held on the
worker's own connection). Otherwise, with ``REDIS_URL``: a Redis lock with a
timeout, so a crashed worker cannot hold it forever. Embedded mode (SQLite, no
Redis): an ``flock`` on a file under ``VC_DATA_DIR/locks``, which also
serialises the web process and the writer process of one machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

from memory_app.errors import LockTimeout

_ADVISORY_NAMESPACE = 0x7663  # "vc": keeps our advisory keys apart from others'
_SESSION_NAMESPACE = 0x7673  # "vs": client session ids
LOCK_TTL = 600  # seconds a Redis lock survives a crashed holder


@contextmanager
def conversation_lock(conversation_id: int, *, wait: float = 300.0) -> Iterator[None]:
    """Hold the conversation's lock; raise ``LockTimeout`` after ``wait`` seconds."""
    with _lock(_ADVISORY_NAMESPACE, conversation_id, f"conversation-{conversation_id}", wait):
        yield


@contextmanager
def session_lock(account_id: int, session_id: str, *, wait: float = 30.0) -> Iterator[None]:
    """Hold the lock of one account's client session id (``X-VC-Session``)."""
    digest = hashlib.blake2b(f"{account_id}:{session_id}".encode(), digest_size=4).digest()
    key = int.from_bytes(digest, "big", signed=True)  # an int4, as the advisory lock takes
    with _lock(_SESSION_NAMESPACE, key, f"session-{account_id}-{digest.hex()}", wait, account_id):
        yield


@contextmanager
def _lock(namespace: int, key: int, name: str, wait: float, owner: int = 0) -> Iterator[None]:
    if connection.vendor == "postgresql":
        with _advisory_lock(namespace, key, wait, owner or key):
            yield
    elif settings.REDIS_URL:
        with _redis_lock(name, wait, owner or key):
            yield
    else:
        with _file_lock(name, wait, owner or key):
            yield


@contextmanager
def _advisory_lock(namespace: int, key: int, wait: float, owner: int) -> Iterator[None]:
    deadline = time.monotonic() + wait
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
            if cursor.fetchone()[0]:
                break
            if time.monotonic() > deadline:
                raise LockTimeout(owner)
            time.sleep(0.05)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])


@contextmanager
def _redis_lock(name: str, wait: float, owner: int) -> Iterator[None]:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(f"vc:lock:{name}", timeout=LOCK_TTL)
    if not lock.acquire(blocking=True, blocking_timeout=wait):
        raise LockTimeout(owner)
    try:
        yield
    finally:
        lock.release()
        client.close()


@contextmanager
def _file_lock(name: str, wait: float, owner: int) -> Iterator[None]:
    folder = settings.DATA_DIR / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    with (folder / f"{name}.lock").open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(owner) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
