"""The background writer: exchange records and live events, off the request path.

``record_submit`` and ``event_submit`` only append to in-memory lists. A flush
loop (started at lifespan startup, or lazily on first use) writes the records in
one transaction in a worker thread at most every ``FLUSH_INTERVAL`` seconds,
and sends the live events to the channel layer. A failed batch is retried
(``RETRIES`` times, with backoff); if it still fails it is appended to
``VC_DATA_DIR/failed-records.jsonl`` and logged, never raised into a request.
``writer_flush`` drains everything (shutdown, tests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from decimal import Decimal
from typing import Any

import orjson
from django.conf import settings

from proxy_app.db import db_call
from proxy_app.services import ExchangeRecord, records_persist
from telemetry_app.events import event_broadcast
from vcloud.lifespan import on_shutdown

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.2
RETRIES = 3
BATCH_MAX = 2000


class Writer:
    def __init__(self) -> None:
        self.records: list[ExchangeRecord] = []
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.failed_batches = 0
        self.written = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="vc-writer")

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
                if batch:
                    await self._persist(batch)
                for record in batch:  # after persisting: the cost is known now
                    await event_broadcast(
                        account_id=record.account_id,
                        event_type="request.done",
                        payload=record_event(record),
                    )

    async def _persist(self, batch: list[ExchangeRecord]) -> None:
        for attempt in range(1, RETRIES + 1):
            try:
                await db_call(records_persist, batch)
                self.written += len(batch)
                return
            except Exception:
                log.exception("writing %d records failed (attempt %d)", len(batch), attempt)
                await asyncio.sleep(0.05 * 2**attempt)
        self.failed_batches += 1
        await db_call(_dead_letter, batch)

    def submit(self, record: ExchangeRecord) -> None:
        self.records.append(record)
        self._kick()

    def event(self, account_id: int, kind: str, payload: dict[str, Any]) -> None:
        self.events.append((account_id, kind, payload))
        self._kick()

    def _kick(self) -> None:
        self.ensure_running()
        self._wake.set()


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


def _dead_letter(batch: list[ExchangeRecord]) -> None:
    path = settings.DATA_DIR / "failed-records.jsonl"
    with path.open("ab") as handle:
        for record in batch:
            handle.write(orjson.dumps(dataclasses.asdict(record), default=_default) + b"\n")
    log.error("%d records kept in %s after %d failed attempts", len(batch), path, RETRIES)


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


@on_shutdown
async def writer_flush() -> None:
    if _writer is not None:
        await _writer.flush()
