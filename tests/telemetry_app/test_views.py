"""The dashboard pages: login, account scoping, filters, sort, pagination, the CSV
export, and a bounded number of queries however many rows there are."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from memory_app.models import Conversation, JobState, MemoryJob
from telemetry_app.models import LLMCall
from telemetry_app.rollups import ledger_dict, rollups_add
from tests import factories

pytestmark = pytest.mark.django_db

PAGES = ["dashboard", "sessions", "savings", "telemetry"]


@pytest.fixture(autouse=True)
def _no_memory_jobs(settings):
    settings.VC_MEMORY_JOBS = False


def own_call(account, conversation, *, cost: str = "0.0010", at=None) -> LLMCall:
    """One of vcloud's own LLM calls, recorded the way memory_app.llm records it."""
    call = LLMCall.objects.create(
        account=account,
        conversation=conversation,
        component="compactor",
        provider="openai",
        model="gpt-4o-mini",
        input_tokens=2000,
        output_tokens=100,
        cost=Decimal(cost),
        duration_ms=300,
        created_at=at or timezone.now(),
    )
    rollups_add(requests=[], calls=[ledger_dict(call)])
    return call


def seed(account, n: int, *, prefix: str = "alice", key_name: str = "laptop", **extra):
    """``n`` conversations with one request each, through the writer's own path."""
    key, _ = factories.vckey_for(account, key_name)
    conversations = [
        factories.conversation_create(account, session_id=f"{prefix}-session-{i}") for i in range(n)
    ]
    Conversation.objects.filter(pk__in=[c.pk for c in conversations]).update(vckey=key)
    now = timezone.now()
    factories.records_write(
        [
            factories.exchange_record(
                account,
                key,
                c,
                request_id=f"{prefix}-{i}",
                created_at=now - timedelta(seconds=n - i),
                **extra,
            )
            for i, c in enumerate(conversations)
        ]
    )
    return key, conversations


# ----------------------------------------------------------------- access


@pytest.mark.parametrize("name", PAGES)
def test_every_page_answers_its_owner(logged_in, account, name):
    seed(account, 3)
    response = logged_in.get(reverse(name))
    assert response.status_code == 200
    assert b"alice alice-session-2" in response.content  # a conversation of the account


@pytest.mark.parametrize("name", PAGES)
def test_pages_need_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


def test_session_pages_need_login(client, account):
    conversation = factories.conversation_create(account)
    response = client.get(reverse("session_detail", args=[conversation.pk]))
    assert response.status_code == 302


def test_logging_in_lands_on_the_overview(client, account):
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response["Location"] == reverse("dashboard")


def test_the_nav_links_every_page(logged_in):
    body = logged_in.get(reverse("dashboard")).content.decode()
    for name in [*PAGES, "keys", "settings"]:
        assert f'href="{reverse(name)}"' in body
    assert 'href="/admin/"' not in body  # staff only


def test_session_detail_shows_its_requests(logged_in, account):
    _, (conversation,) = seed(account, 1)
    response = logged_in.get(reverse("session_detail", args=[conversation.pk]))
    assert response.status_code == 200
    assert [r.request_id for r in response.context["requests"]] == ["alice-0"]
    assert conversation.title in response.content.decode()


def test_another_accounts_session_is_not_found(logged_in, other_account):
    _, (theirs,) = seed(other_account, 1, prefix="mallory")
    assert logged_in.get(reverse("session_detail", args=[theirs.pk])).status_code == 404
    assert logged_in.get(reverse("session_detail", args=[999_999])).status_code == 404


def test_pages_never_show_another_accounts_rows(logged_in, account, other_account):
    seed(account, 2)
    _, theirs = seed(other_account, 3, prefix="mallory", key_name="mallory-key", model="gpt-4o")
    own_call(other_account, theirs[0])
    for name in PAGES:
        body = logged_in.get(reverse(name)).content.decode()
        assert "mallory" not in body, name
        assert "gpt-4o" not in body, name
    overview = logged_in.get(reverse("dashboard")).context
    assert [k.totals.requests for k in overview["kpis"]] == [2, 2, 2]
    assert len(overview["requests"]) == 2
    their_key = Conversation.objects.get(pk=theirs[0].pk).vckey_id
    sessions = logged_in.get(reverse("sessions"), {"key": their_key}).context
    assert sessions["page"].paginator.count == 2  # a foreign key id filters nothing in
    savings = logged_in.get(reverse("savings")).context["report"]
    assert savings.total.requests == 2
    assert savings.total.own_cost == 0
    telemetry = logged_in.get(reverse("telemetry")).context
    assert {c.component for c in telemetry["components"]} == {"proxy_upstream"}
    assert {call.account_id for call in telemetry["calls"].object_list} == {account.pk}


# ---------------------------------------------------------------- overview


def test_overview_counts_windows_and_lists_newest_first(logged_in, account):
    key, conversations = seed(account, 3)
    old = factories.exchange_record(
        account,
        key,
        conversations[0],
        request_id="ten-days-ago",
        created_at=timezone.now() - timedelta(days=10),
    )
    factories.records_write([old])
    own_call(account, conversations[0])
    context = logged_in.get(reverse("dashboard")).context
    today, week, month = context["kpis"]
    assert (today.totals.requests, week.totals.requests, month.totals.requests) == (3, 3, 4)
    assert (today.totals.client_tokens, today.totals.upstream_tokens) == (9000, 3000)
    # Three requests: baseline 3 × $0.0105, cost 3 × $0.0045, our own call $0.001.
    assert today.totals.saving == Decimal("0.017")
    assert today.active_sessions == 3
    assert [r.request_id for r in context["requests"]] == [
        "alice-2",
        "alice-1",
        "alice-0",
        "ten-days-ago",
    ]


@pytest.mark.parametrize("span", ["24h", "7d", "30d", "bogus"])
def test_overview_chart_spans(logged_in, account, span):
    seed(account, 2)
    response = logged_in.get(reverse("dashboard"), {"chart": span})
    chart = response.context["chart"]
    assert not chart.empty
    assert len(chart.bars) == {"24h": 24, "7d": 7, "30d": 30, "bogus": 24}[span]
    assert b"<svg" in response.content


# ---------------------------------------------------------------- sessions


def test_sessions_search_filter_and_sort(logged_in, account):
    laptop, conversations = seed(account, 4)
    ci, gemini = seed(
        account, 2, prefix="bob", key_name="ci", format="gemini", model="gemini-2.5-flash"
    )
    Conversation.objects.filter(pk__in=[c.pk for c in gemini]).update(
        format="gemini", model="gemini-2.5-flash"
    )
    Conversation.objects.filter(pk=conversations[0].pk).update(
        title="kitchen renovation", turn_count=40, updated_at=timezone.now() - timedelta(days=20)
    )

    def ids(**params):
        page = logged_in.get(reverse("sessions"), params).context["page"]
        return [c.pk for c in page.object_list]

    assert ids(q="kitchen") == [conversations[0].pk]
    assert ids(q="bob-session-1") == [gemini[1].pk]
    assert set(ids(key=ci.pk)) == {c.pk for c in gemini}
    assert set(ids(format="gemini")) == {c.pk for c in gemini}
    assert set(ids(model="gemini-2.5-flash")) == {c.pk for c in gemini}
    old_day = (timezone.now() - timedelta(days=20)).date().isoformat()
    assert ids(start=old_day, end=old_day) == [conversations[0].pk]
    assert conversations[0].pk not in ids(start=timezone.now().date().isoformat())
    assert ids(sort="-turns")[0] == conversations[0].pk
    assert ids(sort="turns")[-1] == conversations[0].pk
    assert ids(sort="title")[0] == conversations[1].pk  # "alice alice-session-1"
    assert ids(sort="-title")[0] == conversations[0].pk  # "kitchen renovation"
    assert ids()[-1] == conversations[0].pk  # last activity, newest first by default


def test_sessions_paginate_and_show_pending_work(logged_in, account):
    _, conversations = seed(account, 30)
    MemoryJob.objects.create(conversation=conversations[-1], kind="process")
    MemoryJob.objects.create(conversation=conversations[-1], kind="compact", state=JobState.RUNNING)
    MemoryJob.objects.create(conversation=conversations[-2], kind="process", state=JobState.DONE)
    first = logged_in.get(reverse("sessions")).context["page"]
    assert first.paginator.count == 30
    assert len(first.object_list) == 25
    newest = first.object_list[0]
    assert (newest.pk, newest.pending_jobs) == (conversations[-1].pk, 2)
    assert first.object_list[1].pending_jobs == 0
    second = logged_in.get(reverse("sessions"), {"page": 2}).context["page"]
    assert len(second.object_list) == 5
    assert {c.pk for c in first.object_list}.isdisjoint(c.pk for c in second.object_list)
    body = logged_in.get(reverse("sessions"), {"page": 2, "q": "alice"}).content.decode()
    assert "?page=1&amp;q=alice" in body or "?q=alice&amp;page=1" in body


def test_bad_filter_values_fall_back_instead_of_failing(logged_in, account):
    seed(account, 2)
    response = logged_in.get(
        reverse("sessions"), {"key": "nope", "start": "yesterday", "sort": "x", "page": "9"}
    )
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 2


# ----------------------------------------------------------------- savings


def csv_rows(response) -> list[dict[str, str]]:
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_savings_are_net_of_our_own_llm_calls(logged_in, account):
    _, conversations = seed(account, 2)
    own_call(account, conversations[0], cost="0.002")
    own_call(account, None, cost="0.001")
    report = logged_in.get(reverse("savings")).context["report"]
    total = report.total
    assert (total.baseline_cost, total.cost, total.own_cost) == (
        Decimal("0.021"),
        Decimal("0.009"),
        Decimal("0.003"),
    )
    assert total.saving == Decimal("0.009")
    first = next(s for s in report.sessions.object_list if s.ref == conversations[0].pk)
    assert first.saving == Decimal("0.0105") - Decimal("0.0045") - Decimal("0.002")
    assert report.own_without_session.own_cost == Decimal("0.001")
    assert [m.label for m in report.by_model] == ["claude-sonnet-4-5", "vcloud's own LLM calls"]
    assert sum(m.saving for m in report.by_model) == total.saving
    assert sum(k.saving for k in report.by_key) == total.saving
    in_sessions = sum(s.saving for s in report.sessions.object_list)
    assert in_sessions + report.own_without_session.saving == total.saving
    rows = csv_rows(logged_in.get(reverse("savings"), {"format": "csv"}))
    last = [r for r in rows if r["breakdown"] == "session"][-1]
    assert (last["label"], Decimal(last["net_saving_usd"])) == (
        "vcloud's own LLM calls outside any session",
        Decimal("-0.001"),
    )


def test_savings_csv_has_the_numbers_of_the_page(logged_in, account):
    _, conversations = seed(account, 3)
    own_call(account, conversations[1])
    page = logged_in.get(reverse("savings"))
    report = page.context["report"]
    assert "the full history the client sent" in page.content.decode()
    rows = csv_rows(logged_in.get(reverse("savings"), {"format": "csv"}))
    shown = {
        "total": [report.total],
        "day": report.by_day,
        "model": report.by_model,
        "key": report.by_key,
        "session": report.sessions.object_list,  # all our own calls here are in a session
    }
    expected = [(name, s) for name, slices in shown.items() for s in slices]
    assert len(rows) == len(expected)
    for row, (name, s) in zip(rows, expected, strict=True):
        assert (row["breakdown"], row["label"]) == (name, s.label)
        assert int(row["requests"]) == s.requests
        assert int(row["client_tokens"]) == s.client_tokens
        assert Decimal(row["actual_cost_usd"]) == s.cost
        assert Decimal(row["baseline_cost_usd"]) == s.baseline_cost
        assert Decimal(row["own_llm_cost_usd"]) == s.own_cost
        assert Decimal(row["net_saving_usd"]) == s.saving


def test_savings_date_range_picks_the_days(logged_in, account):
    key, (conversation,) = seed(account, 1)
    long_ago = timezone.now() - timedelta(days=40)
    factories.records_write(
        [
            factories.exchange_record(
                account, key, conversation, request_id="old", created_at=long_ago
            )
        ]
    )
    default = logged_in.get(reverse("savings")).context["report"]
    assert default.total.requests == 1
    assert [d.ref for d in default.by_day] == [timezone.now().date()]  # days with traffic
    day = long_ago.date().isoformat()
    picked = logged_in.get(reverse("savings"), {"start": day, "end": day}).context["report"]
    assert picked.total.requests == 1
    assert [d.label for d in picked.by_day] == [day]
    assert [s.ref for s in picked.sessions.object_list] == [conversation.pk]
    rows = csv_rows(logged_in.get(reverse("savings"), {"start": day, "end": day, "format": "csv"}))
    assert rows[0]["requests"] == "1"
    earlier = (long_ago - timedelta(days=5)).date()
    backwards = logged_in.get(reverse("savings"), {"start": day, "end": earlier.isoformat()})
    assert backwards.context["report"].range.start == earlier


def test_savings_sessions_paginate_by_saving(logged_in, account):
    seed(account, 25)
    first = logged_in.get(reverse("savings")).context["report"].sessions
    assert (first.paginator.count, len(first.object_list)) == (25, 20)
    second = logged_in.get(reverse("savings"), {"spage": 2}).context["report"].sessions
    assert len(second.object_list) == 5
    rows = csv_rows(logged_in.get(reverse("savings"), {"spage": 2, "format": "csv"}))
    assert sum(r["breakdown"] == "session" for r in rows) == 25  # every session, not a page


# --------------------------------------------------------------- telemetry


def test_telemetry_ledger_per_component_with_percentiles(logged_in, account):
    _, conversations = seed(account, 4)
    for n in range(1, 11):
        call = own_call(account, conversations[0])
        LLMCall.objects.filter(pk=call.pk).update(duration_ms=n * 100)
    context = logged_in.get(reverse("telemetry")).context
    by_name = {c.component: c for c in context["components"]}
    compactor = by_name["compactor"]
    assert (compactor.calls, compactor.cost) == (10, Decimal("0.01"))
    assert compactor.p50_ms == pytest.approx(550)
    assert compactor.p95_ms == pytest.approx(955)
    proxy = by_name["proxy_upstream"]
    assert (proxy.requests, proxy.calls, proxy.mean_ms) == (4, 4, 0)
    assert context["calls"].paginator.count == 14


# ------------------------------------------------------------------ queries


@pytest.mark.parametrize(
    ("name", "params", "most"),
    [
        # session, user and account, then the page's own reads
        ("dashboard", {}, 7),
        ("sessions", {}, 8),
        ("sessions", {"q": "alice", "sort": "-turns", "page": 2}, 8),
        ("savings", {}, 9),
        ("savings", {"format": "csv"}, 9),
        ("telemetry", {}, 8),  # one latency sample per component present (here two)
    ],
)
def test_pages_take_a_bounded_number_of_queries(
    logged_in, account, django_assert_max_num_queries, name, params, most
):
    _, conversations = seed(account, 50)
    for conversation in conversations[:20]:
        own_call(account, conversation)
        MemoryJob.objects.create(conversation=conversation, kind="process")
    with django_assert_max_num_queries(most):
        assert logged_in.get(reverse(name), params).status_code == 200


def test_session_detail_takes_a_bounded_number_of_queries(
    logged_in, account, django_assert_max_num_queries
):
    key, (conversation,) = seed(account, 1)
    factories.records_write(
        [
            factories.exchange_record(account, key, conversation, request_id=f"more-{n}")
            for n in range(50)
        ]
    )
    # One query per section, not per row (tests/telemetry_app/test_session_detail.py).
    with django_assert_max_num_queries(14):
        logged_in.get(reverse("session_detail", args=[conversation.pk]))
