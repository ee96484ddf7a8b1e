"""The background writer: exchange records and live events, off the request path.

``record_submit`` and ``event_submit`` only append to in-memory lists. A flush
loop (started lazily on first use) runs at most every ``FLUSH_INTERVAL``
seconds: it prices the records, hands them to a sink, and sends the live events
(``request.started`` as they came, ``request.done`` with the cost) to the
channel layer. ``writer_flush`` drains everything (shutdown, tests).

Two sinks write the rows, each one transaction per batch, retried ``RETRIES``
times with backoff; a batch that still fails is appended to
``VC_DATA_DIR/failed-records.jsonl`` and logged, never raised into a request:

- ``ThreadSink`` writes from a worker thread of this process (the default, and
  what tests drive directly);
- ``ProcessSink`` writes from a child process that the server starts at lifespan
  startup (``VC_WRITER_PROCESS``, on by default): at gateway rates the ORM work
  of recording a request costs as much CPU as relaying it, and in a child it
  runs on the other core instead of holding this process's GIL. A clean
  shutdown drains its queue before the server exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import time
from decimal import Decimal
from typing import Any, Protocol

import orjson
from django.conf import settings

from proxy_app.db import db_call
from proxy_app.services import ExchangeRecord, records_persist, records_price
from telemetry_app.events import event_broadcast
from vcloud.lifespan import on_shutdown, on_startup

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.2
RETRIES = 3
BATCH_MAX = 2000


class Sink(Protocol):
    async def write(self, batch: list[ExchangeRecord]) -> None: ...
    async def close(self) -> None: ...


def records_persist_reliably(batch: list[ExchangeRecord], retries: int) -> bool:
    """Write a batch, retrying; keep it in the dead-letter file if it still fails."""
    for attempt in range(1, retries + 1):
        try:
            records_persist(batch)
        except Exception:
            log.exception("writing %d records failed (attempt %d)", len(batch), attempt)
            time.sleep(0.05 * 2**attempt)
            continue
        _memory_jobs(batch)
        return True
    _dead_letter(batch, retries)
    return False


def _memory_jobs(batch: list[ExchangeRecord]) -> None:
    """New turns start the conversation's background memory work."""
    if not settings.VC_MEMORY_JOBS:
        return
    ids = {r.conversation_id for r in batch if r.turns and r.conversation_id is not None}
    if not ids:
        return
    from memory_app.services.jobs import jobs_enqueue

    try:
        jobs_enqueue(conversation_ids=ids)
    except Exception:
        log.exception("enqueueing memory jobs for %d conversations failed", len(ids))


class ThreadSink:
    def __init__(self) -> None:
        self.written = 0
        self.failed_batches = 0

    async def write(self, batch: list[ExchangeRecord]) -> None:
        if await db_call(records_persist_reliably, batch, RETRIES):
            self.written += len(batch)
        else:
            self.failed_batches += 1

    async def close(self) -> None:
        return None


class ProcessSink:
    """Hand batches to a child process; if the child is gone, write them here."""

    def __init__(self) -> None:
        from proxy_app.writer_child import writer_process_main

        context = multiprocessing.get_context("spawn")
        self.queue: Any = context.Queue()
        database = dict(settings.DATABASES["default"])
        self.process = context.Process(
            target=writer_process_main,
            args=(self.queue, database, {"VC_MEMORY_JOBS": settings.VC_MEMORY_JOBS}),
            name="vc-writer",
            daemon=True,
        )
        self.process.start()
        self.fallback = ThreadSink()

    async def write(self, batch: list[ExchangeRecord]) -> None:
        if self.process.is_alive():
            self.queue.put(batch)  # pickled and sent by the queue's feeder thread
            return
        log.error(
            "the writer process has exited (code %s); writing in-process", self.process.exitcode
        )
        await self.fallback.write(batch)

    async def close(self) -> None:
        if self.process.is_alive():
            self.queue.put(None)
            await asyncio.to_thread(self.process.join, 60)
        if self.process.is_alive():
            log.error("the writer process did not finish in 60 s; stopping it")
            self.process.terminate()
        if self.process.exitcode:
            # Nothing reads the pipe any more: don't let interpreter exit wait on it.
            self.queue.cancel_join_thread()
        self.queue.close()


class Writer:
    def __init__(self, sink: Sink | None = None) -> None:
        self.sink: Sink = sink or ThreadSink()
        self.records: list[ExchangeRecord] = []
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def submit(self, record: ExchangeRecord) -> None:
        self.records.append(record)
        self._kick()

    def event(self, account_id: int, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((account_id, kind, payload))
        self._kick()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="vc-writer")
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(FLUSH_INTERVAL)  # gather a batch
            try:
                await self.flush()
            except Exception:
                log.exception("writer flush failed")

    async def flush(self) -> None:
        async with self._lock:
            while self.events or self.records:
                events, self.events = self.events, []
                batch, self.records = self.records[:BATCH_MAX], self.records[BATCH_MAX:]
                for account_id, kind, payload in events:
                    await event_broadcast(account_id=account_id, event_type=kind, payload=payload)
                if not batch:
                    continue
                await db_call(records_price, batch)
                await self.sink.write(batch)
                for record in batch:
                    await event_broadcast(
                        account_id=record.account_id,
                        event_type="request.done",
                        payload=record_event(record),
                    )

    async def close(self) -> None:
        await self.flush()
        await self.sink.close()


def record_event(record: ExchangeRecord) -> dict[str, Any]:
    """The live event of a finished request, as the dashboard shows it."""
    return {
        "request_id": record.request_id,
        "conversation_id": record.conversation_id,
        "format": record.format,
        "model": record.model,
        "stream": record.stream,
        "status": record.status,
        "client_tokens": record.client_tokens,
        "upstream_tokens": record.upstream_tokens,
        "cached_tokens": record.cached_tokens,
        "output_tokens": record.output_tokens,
        "cost": str(record.cost),
        "overhead_ms": record.overhead_ms,
        "upstream_ms": record.upstream_ms,
        "error": record.error,
        "created_at": record.created_at.isoformat(),
    }


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError


def _dead_letter(batch: list[ExchangeRecord], retries: int) -> None:
    path = settings.DATA_DIR / "failed-records.jsonl"
    with path.open("ab") as handle:
        for record in batch:
            handle.write(orjson.dumps(dataclasses.asdict(record), default=_default) + b"\n")
    log.error("%d records kept in %s after %d failed attempts", len(batch), path, retries)


_writer: Writer | None = None


def writer() -> Writer:
    global _writer
    if _writer is None:
        _writer = Writer()
    return _writer


def record_submit(record: ExchangeRecord) -> None:
    writer().submit(record)


def event_submit(account_id: int, kind: str, payload: dict[str, Any]) -> None:
    writer().event(account_id, kind, payload)


@on_startup
async def writer_start() -> None:
    global _writer
    if settings.VC_WRITER_PROCESS:
        _writer = Writer(ProcessSink())


@on_shutdown
async def writer_flush() -> None:
    if _writer is not None:
        await _writer.close()
