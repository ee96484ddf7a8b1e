"""The background writer: batches land exactly once, shutdown flushes, and a
database error is retried, then kept in the dead-letter file, never raised."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from django.conf import settings
from django.utils import timezone

from memory_app.models import Turn
from proxy_app import writer as writer_module
from proxy_app.services import ExchangeRecord, TurnRecord
from proxy_app.writer import Writer
from telemetry_app.models import LLMCall, RequestLog
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_memory_jobs(settings):
    """These tests count the writer's own rows; the memory's background jobs
    (tests/memory_app, tests/proxy_app/test_e2e_memory.py) stay out of them."""
    settings.VC_MEMORY_JOBS = False


def _record(account, key, conversation, n: int, **extra) -> ExchangeRecord:
    return ExchangeRecord(
        request_id=f"req-{n}",
        account_id=account.pk,
        key_id=key.pk,
        conversation_id=conversation.pk if conversation else None,
        format="anthropic",
        provider="anthropic",
        path="/v1/messages",
        model="claude-sonnet-4-5",
        stream=False,
        status=200,
        created_at=timezone.now(),
        upstream_tokens=1000,
        output_tokens=100,
        **extra,
    )


def _turn(position: int, text: str) -> TurnRecord:
    role = "user" if position % 2 == 0 else "assistant"
    return TurnRecord(position, role, {"role": role, "content": text}, text, f"h-{text}")


async def test_a_burst_of_records_lands_exactly_once_with_costs(account):
    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    conversation = await asyncio.to_thread(factories.conversation_create, account)
    w = Writer()
    for n in range(500):
        w.submit(
            _record(account, key, conversation, n, turns=[_turn(n, f"t{n}")], turn_count=n + 1)
        )
    await w.flush()
    w.submit(_record(account, key, conversation, 0))  # a retried duplicate of req-0
    await w.flush()
    assert await RequestLog.objects.acount() == 500
    assert await LLMCall.objects.acount() == 500
    assert await Turn.objects.filter(conversation=conversation).acount() == 500
    call = await LLMCall.objects.aget(request_id="req-7")
    # claude-sonnet-4-5: 1000 input × $3 + 100 output × $15 per million.
    assert float(call.cost) == pytest.approx(0.0045)
    await key.arefresh_from_db()
    assert key.request_count == 500
    await conversation.arefresh_from_db()
    assert conversation.request_count == 500
    assert conversation.turn_count == 500


async def test_edits_within_one_batch_keep_only_the_latest_version(account):
    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    conversation = await asyncio.to_thread(factories.conversation_create, account, turns=2)
    w = Writer()
    # The client edits turn 1, then edits it again, in the same flush window.
    w.submit(_record(account, key, conversation, 1, turns=[_turn(1, "v2")], replaced_from=1))
    w.submit(_record(account, key, conversation, 2, turns=[_turn(1, "v3")], replaced_from=1))
    await w.flush()
    rows = [
        (t.position, t.text, t.replaced)
        async for t in Turn.objects.filter(conversation=conversation).order_by("id")
    ]
    assert rows == [
        (0, "alice turn 0", False),
        (1, "alice turn 1", True),
        (1, "v2", True),
        (1, "v3", False),
    ]


async def test_a_failing_batch_is_retried_then_kept_not_raised(account, monkeypatch):
    monkeypatch.setattr(writer_module, "RETRIES", 2)
    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    dead = settings.DATA_DIR / "failed-records.jsonl"
    dead.unlink(missing_ok=True)
    w = Writer()
    bad = _record(account, key, None, 1)
    bad.account_id = 999_999  # no such account: the database refuses the batch
    w.submit(bad)
    await w.flush()  # does not raise
    assert w.sink.failed_batches == 1
    assert await RequestLog.objects.acount() == 0
    kept = [orjson.loads(line) for line in dead.read_bytes().splitlines()]
    assert [r["request_id"] for r in kept] == ["req-1"]
    # The writer keeps working afterwards.
    w.submit(_record(account, key, None, 2))
    await w.flush()
    assert await RequestLog.objects.filter(request_id="req-2").aexists()


async def test_records_submitted_without_an_explicit_flush_are_written_within_a_second(account):
    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    w = Writer()
    w.submit(_record(account, key, None, 1))
    for _ in range(100):
        if await RequestLog.objects.filter(request_id="req-1").aexists():
            break
        await asyncio.sleep(0.02)
    assert await RequestLog.objects.filter(request_id="req-1").aexists()
    assert w.sink.written == 1
    await w.close()


async def test_a_clean_shutdown_flushes_what_is_pending(account, monkeypatch):
    # The writer's own shutdown hook: the other hooks close resources (the
    # upstream session, the key watch) that earlier tests' loops created.
    run_shutdown = writer_module.writer_flush
    monkeypatch.setattr(writer_module, "_writer", None)  # a writer bound to this loop
    monkeypatch.setattr(writer_module, "FLUSH_INTERVAL", 60)  # only shutdown can flush
    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    for n in range(20):
        writer_module.record_submit(_record(account, key, None, n))
    assert await RequestLog.objects.acount() == 0
    await run_shutdown()
    assert await RequestLog.objects.acount() == 20


async def test_the_writer_process_writes_every_record_before_it_stops(account):
    from proxy_app.writer import ProcessSink

    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    conversation = await asyncio.to_thread(factories.conversation_create, account)
    w = Writer(ProcessSink())
    for n in range(300):
        w.submit(_record(account, key, conversation, n, turns=[_turn(n, f"t{n}")]))
        if n % 100 == 0:
            await w.flush()  # several batches cross the queue
    await w.close()
    assert not w.sink.process.is_alive()
    assert await RequestLog.objects.acount() == 300
    assert await Turn.objects.filter(conversation=conversation).acount() == 300
    assert await LLMCall.objects.filter(cost__gt=0).acount() == 300


async def test_records_still_land_when_the_writer_process_has_died(account):
    from proxy_app.writer import ProcessSink

    key, _ = await asyncio.to_thread(factories.vckey_for, account)
    sink = ProcessSink()
    sink.process.kill()
    await asyncio.to_thread(sink.process.join, 10)
    w = Writer(sink)
    for n in range(5):
        w.submit(_record(account, key, None, n))
    await w.close()
    assert await RequestLog.objects.acount() == 5
