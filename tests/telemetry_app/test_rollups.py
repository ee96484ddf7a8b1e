"""Rollups are kept as rows land: hourly per account × key × model × component,
daily per session; the writer's batch path and our own LLM calls both fill them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from memory_app.llm import LLMClient, LLMSettings, llm_clients_close
from telemetry_app.models import LLMCall, RequestLog, Rollup, SessionRollup
from telemetry_app.rollups import hour_of, rollups_add, rollups_backfill
from tests import factories
from tests.fakes.provider import start_fake_provider

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 15, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_memory_jobs(settings):
    settings.VC_MEMORY_JOBS = False


@pytest.fixture
def keys(account):
    return factories.vckey_for(account, "laptop")[0], factories.vckey_for(account, "ci")[0]


def request_row(account, key, conversation=None, *, at=T0, model="claude-sonnet-4-5", **extra):
    row = {
        "account_id": account.pk,
        "vckey_id": key.pk,
        "conversation_id": conversation.pk if conversation else None,
        "request_id": f"r-{at.timestamp()}-{model}-{key.pk}-{len(extra)}",
        "model": model,
        "status": 200,
        "client_tokens": 3000,
        "upstream_tokens": 1000,
        "cached_tokens": 200,
        "output_tokens": 100,
        "cost": Decimal("0.0045"),
        "baseline_cost": Decimal("0.0105"),
        "overhead_ms": 1.5,
        "upstream_ms": 400.0,
        "created_at": at,
    }
    return {**row, **extra}


def call_row(account, conversation=None, *, at=T0, component="tagger", **extra):
    row = {
        "account_id": account.pk,
        "conversation_id": conversation.pk if conversation else None,
        "request_id": "",
        "component": component,
        "model": "gpt-4o-mini",
        "input_tokens": 900,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 50,
        "cost": Decimal("0.0002"),
        "duration_ms": 250.0,
        "created_at": at,
    }
    return {**row, **extra}


def bucket(account, **where):
    return Rollup.objects.get(account=account, **where)


def test_requests_are_summed_per_hour_key_and_model(account, keys):
    laptop, ci = keys
    later = T0 + timedelta(hours=1)
    rollups_add(
        requests=[
            request_row(account, laptop),
            request_row(account, laptop, at=T0 + timedelta(minutes=40), status=529),
            request_row(account, ci),
            request_row(account, laptop, model="gpt-4o"),
            request_row(account, laptop, at=later),
        ],
        calls=[],
    )
    assert Rollup.objects.count() == 4
    first = bucket(account, hour=hour_of(T0), vckey=laptop, model="claude-sonnet-4-5")
    assert first.hour == datetime(2026, 3, 2, 10, tzinfo=UTC)
    assert first.component == "proxy_upstream"
    assert (first.requests, first.errors, first.calls) == (2, 1, 0)
    assert (first.client_tokens, first.upstream_tokens, first.cached_tokens) == (6000, 2000, 400)
    assert first.output_tokens == 200
    assert first.cost == Decimal("0.009")
    assert first.baseline_cost == Decimal("0.021")
    assert (first.duration_ms, first.overhead_ms) == (800.0, 3.0)
    assert bucket(account, hour=hour_of(T0), vckey=ci).requests == 1
    assert bucket(account, hour=hour_of(T0), model="gpt-4o").requests == 1
    assert bucket(account, hour=hour_of(later)).requests == 1


def test_own_llm_calls_land_per_component_without_a_key(account, keys):
    conversation = factories.conversation_create(account)
    rollups_add(
        requests=[],
        calls=[
            call_row(account, conversation),
            call_row(account, conversation, component="compactor", cost=Decimal("0.001")),
            call_row(account, None),  # not tied to a conversation
        ],
    )
    tagger = bucket(account, component="tagger")
    assert tagger.vckey_id is None
    assert (tagger.calls, tagger.requests, tagger.upstream_tokens) == (2, 0, 1800)
    assert (tagger.output_tokens, tagger.cost, tagger.duration_ms) == (100, Decimal("0.0004"), 500)
    assert bucket(account, component="compactor").cost == Decimal("0.001")
    day = SessionRollup.objects.get(conversation=conversation)
    assert (day.own_calls, day.own_cost, day.requests) == (2, Decimal("0.0012"), 0)


def test_the_ledger_row_of_a_request_adds_its_call_to_the_keyed_bucket(account, keys):
    laptop, _ = keys
    request = request_row(account, laptop)
    ledger = call_row(
        account,
        component="proxy_upstream",
        request_id=request["request_id"],
        model="claude-sonnet-4-5",
        input_tokens=1000,
        cache_write_tokens=300,
        cost=Decimal("0.0045"),
    )
    rollups_add(requests=[request], calls=[ledger])
    row = Rollup.objects.get()  # one bucket: the ledger row did not count twice
    assert row.vckey_id == laptop.pk
    assert (row.requests, row.calls, row.cache_write_tokens) == (1, 1, 300)
    assert (row.upstream_tokens, row.cost) == (1000, Decimal("0.0045"))


def test_adding_to_an_existing_bucket_increments_it(account, keys):
    laptop, _ = keys
    conversation = factories.conversation_create(account)
    batch = [request_row(account, laptop, conversation)]
    rollups_add(requests=batch, calls=[call_row(account, conversation)])
    rollups_add(requests=batch + batch, calls=[call_row(account, conversation)])
    proxy = bucket(account, component="proxy_upstream")
    assert (proxy.requests, proxy.client_tokens, proxy.cost) == (3, 9000, Decimal("0.0135"))
    assert bucket(account, component="tagger").calls == 2
    assert Rollup.objects.count() == 2
    day = SessionRollup.objects.get()
    assert (day.requests, day.client_tokens, day.upstream_tokens) == (3, 9000, 3000)
    assert (day.baseline_cost, day.own_calls) == (Decimal("0.0315"), 2)


def test_session_rollups_split_by_utc_day_and_conversation(account, keys):
    laptop, _ = keys
    a = factories.conversation_create(account, session_id="a")
    b = factories.conversation_create(account, session_id="b")
    next_day = T0 + timedelta(days=1)
    rollups_add(
        requests=[
            request_row(account, laptop, a),
            request_row(account, laptop, a, at=next_day),
            request_row(account, laptop, b),
            request_row(account, laptop, None),  # no conversation: hourly rollup only
        ],
        calls=[],
    )
    days = sorted(
        (r.conversation.session_id, r.day.isoformat(), r.requests)
        for r in SessionRollup.objects.select_related("conversation")
    )
    assert days == [("a", "2026-03-02", 1), ("a", "2026-03-03", 1), ("b", "2026-03-02", 1)]
    assert Rollup.objects.aggregate(n=Sum("requests"))["n"] == 4


def test_accounts_never_share_a_bucket(account, other_account, keys):
    laptop, _ = keys
    other_key, _ = factories.vckey_for(other_account)
    rollups_add(
        requests=[request_row(account, laptop), request_row(other_account, other_key)], calls=[]
    )
    assert Rollup.objects.filter(account=account).get().requests == 1
    assert Rollup.objects.filter(account=other_account).get().requests == 1


def test_a_large_batch_takes_a_bounded_number_of_queries(
    account, keys, django_assert_max_num_queries
):
    laptop, ci = keys
    conversations = [factories.conversation_create(account, session_id=f"s{i}") for i in range(20)]
    rollups_add(requests=[request_row(account, laptop, conversations[0])], calls=[])  # one update
    requests = [
        request_row(
            account,
            (laptop, ci)[n % 2],
            conversations[n % 20],
            at=T0 + timedelta(minutes=7 * n),
            model=("claude-sonnet-4-5", "gpt-4o")[n % 3 % 2],
        )
        for n in range(400)
    ]
    calls = [
        call_row(account, conversations[n % 20], at=T0 + timedelta(minutes=n)) for n in range(50)
    ]
    # A savepoint pair; per table one read, one batched UPDATE, one multi-row INSERT.
    with django_assert_max_num_queries(12):
        rollups_add(requests=requests, calls=calls)
    assert Rollup.objects.aggregate(n=Sum("requests"))["n"] == 401
    assert SessionRollup.objects.aggregate(n=Sum("own_calls"))["n"] == 50


def test_persisted_records_fill_the_rollups_with_their_baseline(account, keys):
    laptop, ci = keys
    conversation = factories.conversation_create(account)
    records = [
        factories.exchange_record(account, laptop, conversation, request_id="r1"),
        factories.exchange_record(
            account,
            laptop,
            conversation,
            request_id="r2",
            cached_tokens=800,
            cache_write_tokens=100,
        ),
        factories.exchange_record(account, ci, None, request_id="r3", model="gpt-4o"),
    ]
    factories.records_write(records)
    logged = RequestLog.objects.get(request_id="r1")
    # claude-sonnet-4-5: 3000 client tokens × $3 + 100 output × $15 per million.
    assert logged.baseline_cost == Decimal("0.0105")
    assert logged.cost == Decimal("0.0045")
    # The baseline has the client's own cache hits: r2 repeats r1's 3000 tokens, of
    # which 2944 (128-token steps) are read at $0.30 and 56 sent plain at $3.
    assert RequestLog.objects.get(request_id="r2").baseline_cost == Decimal("0.0025512")
    sonnet = bucket(account, model="claude-sonnet-4-5")
    assert (sonnet.requests, sonnet.calls, sonnet.cache_write_tokens) == (2, 2, 100)
    totals = RequestLog.objects.aggregate(c=Sum("cost"), b=Sum("baseline_cost"))
    rolled = Rollup.objects.aggregate(c=Sum("cost"), b=Sum("baseline_cost"))
    assert (rolled["c"], rolled["b"]) == (totals["c"], totals["b"])
    day = SessionRollup.objects.get(conversation=conversation)
    assert (day.requests, day.client_tokens) == (2, 6000)
    factories.records_write(records)  # a retried batch is not counted twice
    assert Rollup.objects.aggregate(n=Sum("requests"))["n"] == 3


def test_our_own_llm_calls_fill_the_rollups(account):
    conversation = factories.conversation_create(account)
    running = start_fake_provider()
    try:
        running.fake.reply_text = "travel"
        settings = LLMSettings("openai", running.url, "sk-test", "gpt-4o-mini", backoff=0.001)
        client = LLMClient(settings, account_id=account.pk, conversation_id=conversation.pk)
        client.complete(role="tagger", system="Tag.", prompt="A trip to Lisbon.", max_tokens=16)
    finally:
        llm_clients_close()
        running.stop()
    call = LLMCall.objects.get()
    row = bucket(account, component="tagger")
    assert (row.calls, row.upstream_tokens, row.cost) == (1, call.input_tokens, call.cost)
    assert row.hour == hour_of(call.created_at)
    assert SessionRollup.objects.get(conversation=conversation).own_cost == call.cost


def test_backfill_rolls_up_rows_logged_before_rollups_existed(account, keys):
    laptop, _ = keys
    conversation = factories.conversation_create(account)
    records = [
        factories.exchange_record(account, laptop, conversation, request_id=f"old-{n}")
        for n in range(5)
    ]
    factories.records_write(records)
    own = LLMCall.objects.create(
        account=account,
        conversation=conversation,
        component="tagger",
        provider="openai",
        model="gpt-4o-mini",
        cost=Decimal("0.001"),
        created_at=T0,
    )
    expected = sorted(Rollup.objects.values_list("hour", "component", "requests", "calls", "cost"))
    Rollup.objects.all().delete()
    SessionRollup.objects.all().delete()

    rollups_backfill(
        request_log=RequestLog,
        llm_call=LLMCall,
        rollup=Rollup,
        session_rollup=SessionRollup,
        chunk=2,  # several chunks, each with its requests' ledger rows
    )
    got = sorted(Rollup.objects.values_list("hour", "component", "requests", "calls", "cost"))
    assert got == sorted([*expected, (hour_of(T0), "tagger", 0, 1, own.cost)])
    assert SessionRollup.objects.aggregate(r=Sum("requests"), o=Sum("own_cost")) == {
        "r": 5,
        "o": Decimal("0.001"),
    }


def test_the_baseline_counts_the_clients_own_cache_hits_across_batches_but_not_after_an_edit(
    account, keys
):
    laptop, _ = keys
    conversation = factories.conversation_create(account)
    factories.records_write(
        [factories.exchange_record(account, laptop, conversation, request_id="a")]
    )
    grown = factories.exchange_record(
        account, laptop, conversation, request_id="b", client_tokens=5_000
    )
    edited = factories.exchange_record(
        account, laptop, conversation, request_id="c", client_tokens=5_100, replaced_from=2
    )
    small = factories.exchange_record(
        account, laptop, factories.conversation_create(account), request_id="d", client_tokens=900
    )
    factories.records_write([grown, edited, small])
    # b repeats a's 3000 tokens (a was written in an earlier batch): 2944 read at $0.30,
    # 2056 plain at $3, 100 output at $15 per million.
    assert RequestLog.objects.get(request_id="b").baseline_cost == Decimal("0.0085512")
    # c edited its history: no cached prefix is assumed; d is too short to be cached.
    assert RequestLog.objects.get(request_id="c").baseline_cost == Decimal("0.0168")
    assert RequestLog.objects.get(request_id="d").baseline_cost == Decimal("0.0042")
