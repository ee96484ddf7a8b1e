"""The session page: its timeline, requests and context-window viewer, segments
and tag summaries with their depth in the working set, facts, "Compact now";
scoped to the account, paginated, with a bounded number of queries."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest
from django.urls import reverse
from django.utils import timezone

from memory_app import models as mm
from telemetry_app.selectors import payload_redact
from tests import factories

pytestmark = pytest.mark.django_db

ANTHROPIC_KEY = "sk-ant-api03-abc123DEF456ghi789"


@pytest.fixture(autouse=True)
def _no_memory_jobs(settings):
    settings.VC_MEMORY_JOBS = False


def _url(conversation, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return reverse("session_detail", args=[conversation.pk]) + (f"?{query}" if query else "")


def _session(account, *, turns: int = 4, requests: int = 2):
    """A conversation with turns, a memory graph, requests and a planned request."""
    key, _ = factories.vckey_for(account)
    conversation = factories.conversation_create(account, turns=turns)
    graph = factories.memory_graph_create(conversation)
    now = timezone.now()
    factories.records_write(
        [
            factories.exchange_record(
                account,
                key,
                conversation,
                request_id=f"{account.name}-req-{n}",
                created_at=now - dt.timedelta(seconds=requests - n),
            )
            for n in range(requests)
        ]
    )
    return conversation, graph


def _planned(conversation, request_id: str, **extra) -> mm.RequestContext:
    """A planned request's context record, shaped as the planner's ``_report`` writes it."""
    segment = conversation.segments.first()
    report = {
        "ceiling": 4000,
        "client_tokens": 9000,
        "upstream_tokens": 3800,
        "parts": {"fixed": 300, "stable": 500, "window": 2000, "recall": 1000, "headroom": 200},
        "kept": [[184, 200]],
        "dropped": [[0, 183]],
        "recalled": [
            {
                "key": f"s:{segment.pk}",
                "kind": "segment",
                "tokens": 40,
                "why": "tags #1; bm25 #2",
                "score": 0.0325,
                "signals": {"tags": 0.81, "bm25": 3.2},
                "ranks": {"tags": 1, "bm25": 2},
                "positions": [0, 0],
                "session_date": "2026-01-01",
                "preview": "Moved to Lisbon with the whole family.",
            },
            {
                "key": "t:2",
                "kind": "turn",
                "tokens": 12,
                "why": "cosine #1",
                "score": 0.0161,
                "signals": {"cosine": 0.62},
                "ranks": {"cosine": 1},
                "positions": [2, 2],
                "session_date": "2026-01-01",
                "preview": "The contractor quoted for the cabinets.",
            },
        ],
        "left_out": [
            {
                "key": "t:3",
                "kind": "turn",
                "tokens": 900,
                "why": "bm25 #4",
                "score": 0.0041,
                "signals": {"bm25": 1.1},
                "ranks": {"bm25": 4},
                "positions": [3, 3],
                "session_date": None,
                "preview": "A long tangent about tiles.",
            }
        ],
        "query": {
            "text": "What did the contractor quote?",
            "tags": [["kitchen", 0.9]],
            "date_range": ["2026-01-01", "2026-01-31"],
            "order_hint": None,
        },
        "stable_left_out": ["yen"],
        "reasons": [
            "stable block: 1 topics, 1 tag summaries; 1 topics left out: over its share",
            "recall block: 2 items",
        ],
    }
    return mm.RequestContext.objects.create(
        conversation=conversation,
        request_id=request_id,
        ceiling=4000,
        planned=True,
        client_tokens=9000,
        upstream_tokens=3800,
        report=report,
        created_at=timezone.now(),
        **extra,
    )


# ----------------------------------------------------------------- the page


def test_the_owner_sees_turns_segments_tag_summaries_and_requests(logged_in, account):
    conversation, _ = _session(account)
    response = logged_in.get(_url(conversation))
    assert response.status_code == 200
    body = response.content.decode()
    assert conversation.title in body
    assert "alice turn 3" in body  # a turn of the timeline
    assert 'id="turn-0"' in body
    assert "Moved to Lisbon." in body  # the segment's summary
    assert "Travel plans." in body  # the tag summary
    assert 'class="tag">travel</span>' in body  # the turn's and segment's tag
    assert "alice-req-0" in body
    assert "alice-req-1" in body
    assert "No request of this session has been planned yet" not in body  # one is (the graph's)


def test_turns_are_paginated_newest_page_first_and_marked_compacted(logged_in, account):
    conversation = factories.conversation_create(account, turns=120)
    mm.Conversation.objects.filter(pk=conversation.pk).update(watermark=110)
    page = logged_in.get(_url(conversation)).context["detail"].turns
    assert page.number == 3
    assert page.paginator.num_pages == 3
    assert [t.position for t in page.object_list] == list(range(100, 120))
    assert [t.compacted for t in page.object_list[9:11]] == [True, False]
    first = logged_in.get(_url(conversation, turns=1)).context["detail"].turns
    assert first.object_list[0].position == 0
    held = logged_in.get(_url(conversation, at=57)).context["detail"].turns
    assert held.number == 2


def test_a_long_turn_shows_an_excerpt_that_expands(logged_in, account):
    conversation = factories.conversation_create(account)
    factories.turn_create(conversation, position=0, text="start " + "word " * 400 + "THE END")
    body = logged_in.get(_url(conversation)).content.decode()
    assert "<details><summary>start word" in body
    assert "THE END" in body  # in the expanded part


def test_turn_tags_list_primary_tags_before_related_ones(logged_in, account):
    conversation = factories.conversation_create(account, turns=1)
    turn = conversation.turns.get()
    for name, related in [("aardvark", True), ("zebra", False)]:
        tag = mm.Tag.objects.create(conversation=conversation, name=name)
        mm.TurnTag.objects.create(turn=turn, tag=tag, related=related)
    (shown,) = logged_in.get(_url(conversation)).context["detail"].turns.object_list
    assert [(tt.tag.name, tt.related) for tt in shown.turn_tags.all()] == [
        ("zebra", False),
        ("aardvark", True),
    ]


def test_requests_are_paginated_newest_first(logged_in, account):
    conversation, _ = _session(account, requests=30)
    page = logged_in.get(_url(conversation)).context["requests"]
    assert page.paginator.count == 30
    assert page.object_list[0].request_id == "alice-req-29"
    assert len(page.object_list) == 25
    older = logged_in.get(_url(conversation, requests=2)).context["requests"]
    assert [r.request_id for r in older.object_list][-1] == "alice-req-0"


def test_each_request_shows_the_tokens_read_from_the_providers_cache(logged_in, account):
    conversation, _ = _session(account, requests=0)
    key, _ = factories.vckey_for(account, name="cached")
    record = factories.exchange_record(
        account, key, conversation, request_id="cached-req", cached_tokens=12_345
    )
    factories.records_write([record])
    html = logged_in.get(_url(conversation)).content.decode()
    table = html[html.index('id="session-requests"') :]
    assert ">Cached</th>" in table
    assert '<td class="num">12,345</td>' in table


# ----------------------------------------------------------- context viewer


def test_the_viewer_shows_the_parts_the_recalled_items_and_the_reasons(logged_in, account):
    conversation, _ = _session(account)
    _planned(conversation, "alice-req-1")
    response = logged_in.get(_url(conversation, request="alice-req-1"))
    assert response.status_code == 200
    view = response.context["detail"].viewer
    assert [(p.name, p.tokens) for p in view.bar] == [
        ("fixed", 300),
        ("stable", 500),
        ("window", 2000),
        ("recall", 1000),
        ("headroom", 200),
    ]
    assert sum(p.pct for p in view.bar) == pytest.approx(100)
    body = response.content.decode()
    assert (
        "Client sent <strong>9,000</strong> tokens → sent upstream <strong>3,800</strong>" in body
    )
    assert 'data-part="stable"' in body
    assert 'style="width: 12.50%"' in body
    assert "turns 0–183</a> represented by memory" in body
    assert "turns 184–200</a> sent verbatim" in body
    assert "Moved to Lisbon with the whole family." in body  # recalled, with its preview
    assert "tags #1; bm25 #2" in body  # why
    assert "0.810 <small" in body  # a signal's score, with its rank
    assert "A long tangent about tiles." in body  # left out, with its score
    assert "stable block: 1 topics, 1 tag summaries; 1 topics left out" in body  # a reason
    assert view.reasons == [
        "stable block: 1 topics, 1 tag summaries; 1 topics left out: over its share",
        "recall block: 2 items",
    ]
    assert view.left_out_of_stable == ["yen"]  # (there may be dozens: shown apart)
    assert 'id="ctx-stable-left-out"' in body
    assert '<span class="tag related">yen</span>' in body
    assert "2026-01-01 – 2026-01-31" in body  # the query's date range
    assert "capture payloads" in body  # no payload: says why


def test_the_working_set_depth_of_segments_and_tag_summaries(logged_in, account):
    conversation, graph = _session(account)
    _planned(conversation, "alice-req-1")
    other_segment = mm.Segment.objects.create(
        conversation=conversation, start_position=1, end_position=2, summary="Kitchen plans."
    )
    detail = logged_in.get(_url(conversation)).context["detail"]
    depths = {s.pk: s.depth.level for s in detail.segments.object_list}
    assert depths[graph["segment"].pk] == "recalled"  # "s:<pk>" was recalled
    assert depths[other_segment.pk] == "recalled"  # its turn 2 was, verbatim
    (summary,) = detail.summaries.object_list
    assert summary.depth.level == "stable"  # the request carried a stable block
    mm.TagSummary.objects.filter(pk=summary.pk).update(
        updated_at=timezone.now() + dt.timedelta(hours=1)
    )
    (summary,) = logged_in.get(_url(conversation)).context["detail"].summaries.object_list
    assert summary.depth.level == "memory"  # rewritten since
    context = mm.RequestContext.objects.get(request_id="alice-req-1")
    context.report["stable_left_out"].append("g:travel")
    context.save()
    mm.TagSummary.objects.filter(pk=summary.pk).update(
        updated_at=timezone.now() - dt.timedelta(hours=1)
    )
    (summary,) = logged_in.get(_url(conversation)).context["detail"].summaries.object_list
    assert (summary.depth.level, summary.depth.note) == (
        "memory",
        "left out of the stable block: over its share",
    )


def _as_older_record(context: mm.RequestContext, *left_out: str) -> None:
    """The record as the planner wrote it before ``stable_left_out``: one reason
    line per item left out of the stable block."""
    del context.report["stable_left_out"]
    context.report["reasons"] = [
        *(
            f"{name if name.startswith('g:') else f'topic {name}'} left out of the stable block: "
            "over its share"
            for name in left_out
        ),
        "stable block: 1 topics, 1 tag summaries",
        "recall block: 2 items",
    ]
    context.save()


def test_an_older_record_with_one_reason_per_left_out_item_still_reads(logged_in, account):
    conversation, _ = _session(account)
    _as_older_record(_planned(conversation, "alice-req-1"), "yen", "g:travel")
    mm.TagSummary.objects.filter(conversation=conversation).update(
        updated_at=timezone.now() - dt.timedelta(hours=1)
    )
    response = logged_in.get(_url(conversation, request="alice-req-1"))
    view = response.context["detail"].viewer
    assert view.reasons == ["stable block: 1 topics, 1 tag summaries", "recall block: 2 items"]
    assert view.left_out_of_stable == ["yen", "g:travel"]
    assert '<span class="tag related">g:travel</span>' in response.content.decode()
    (summary,) = response.context["detail"].summaries.object_list
    assert (summary.depth.level, summary.depth.note) == (
        "memory",
        "left out of the stable block: over its share",
    )


def test_a_request_without_a_context_record_was_forwarded_as_sent(logged_in, account):
    conversation, _ = _session(account)
    body = logged_in.get(_url(conversation, request="alice-req-0")).content.decode()
    assert "forwarded as sent: its body was under the ceiling, so nothing was planned" in (
        body.lower()
    )
    assert 'id="ctx-bar"' not in body


def test_an_unplanned_record_says_why_it_went_as_sent(logged_in, account):
    conversation, _ = _session(account)
    mm.RequestContext.objects.create(
        conversation=conversation,
        request_id="alice-req-0",
        ceiling=2000,
        planned=False,
        client_tokens=1500,
        upstream_tokens=1500,
        report={
            "ceiling": 2000,
            "client_tokens": 1500,
            "upstream_tokens": 1500,
            "parts": {"fixed": 0, "window": 1500, "headroom": 500},
            "reasons": ["nothing compacted yet: forwarded as sent"],
        },
        created_at=timezone.now(),
    )
    body = logged_in.get(_url(conversation, request="alice-req-0")).content.decode()
    assert "Forwarded as sent: nothing compacted yet: forwarded as sent." in body
    assert 'data-part="window"' in body
    assert 'data-part="headroom"' in body


def test_the_payload_is_shown_only_when_captured_and_with_keys_redacted(logged_in, account):
    conversation, _ = _session(account)
    payload = {
        "model": "claude-sonnet-4-5",
        "api_key": "plain-secret-value",
        "messages": [{"role": "user", "content": f"my key is {ANTHROPIC_KEY} and AIza{'x' * 35}"}],
    }
    _planned(conversation, "alice-req-1", payload=orjson.dumps(payload).decode())
    _planned(conversation, "alice-req-0")
    body = logged_in.get(_url(conversation, request="alice-req-1")).content.decode()
    assert 'id="ctx-payload"' in body
    assert "claude-sonnet-4-5" in body
    assert "abc123" not in body
    assert "plain-secret-value" not in body
    assert "AIza" + "x" * 35 not in body
    assert "sk-ant-[redacted]" in body
    without = logged_in.get(_url(conversation, request="alice-req-0")).content.decode()
    assert 'id="ctx-payload"' not in without


def test_payload_redaction_catches_provider_keys():
    text = (
        f'{{"x-api-key": "{ANTHROPIC_KEY}", "authorization": "Bearer sk-proj-0123456789abcdef",'
        ' "apiKey": "secret", "note": "sk-short is fine"}'
    )
    redacted = payload_redact(text)
    assert ANTHROPIC_KEY not in redacted
    assert "0123456789abcdef" not in redacted
    assert '"apiKey": "[redacted]"' in redacted
    assert "sk-short is fine" in redacted  # not a key: too short


# ------------------------------------------------------------------- facts


def test_facts_show_their_supersession_chain_and_links(logged_in, account):
    conversation, graph = _session(account)
    newest = mm.Fact.objects.create(
        conversation=conversation, subject="user", verb="lives in", object="Madrid", what="Madrid."
    )
    mm.Fact.objects.filter(pk=graph["fact"].pk).update(
        superseded_by=newest, status=mm.FactStatus.SUPERSEDED
    )
    detail = logged_in.get(_url(conversation)).context["detail"]
    facts = {f.object: f for f in detail.facts.object_list}
    assert [f.object for f in facts["Porto"].chain] == ["Lisbon", "Madrid"]
    assert [(t, a, o.object) for t, a, o in facts["Lisbon"].link_rows] == [
        ("Supersedes", "→", "Porto")
    ]
    assert [(t, a, o.object) for t, a, o in facts["Porto"].link_rows] == [
        ("Supersedes", "←", "Lisbon")
    ]


def test_without_facts_the_page_says_extraction_is_not_built_yet(logged_in, account):
    conversation = factories.conversation_create(account, turns=2)
    body = logged_in.get(_url(conversation)).content.decode()
    assert "Fact extraction is not built yet; facts will appear here." in body
    assert "No request of this session has been planned yet" in body


# ------------------------------------------------------------- compact now


def test_compact_now_queues_a_memory_job(logged_in, account):
    conversation = factories.conversation_create(account, turns=2)
    url = reverse("session_compact", args=[conversation.pk])
    response = logged_in.post(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("session_detail", args=[conversation.pk]) + (
        "#memory-jobs"
    )
    job = mm.MemoryJob.objects.get(conversation=conversation)
    assert (job.kind, job.state) == ("process", mm.JobState.PENDING)
    page = logged_in.get(_url(conversation))
    assert page.context["detail"].pending_jobs == 1
    assert "Memory job queued" in page.content.decode()
    logged_in.post(url)  # one pending job is enough
    assert mm.MemoryJob.objects.filter(conversation=conversation).count() == 1


def test_compact_now_needs_post_and_login(client, logged_in, account):
    conversation = factories.conversation_create(account)
    url = reverse("session_compact", args=[conversation.pk])
    assert logged_in.get(url).status_code == 405
    client.logout()
    response = client.post(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert not mm.MemoryJob.objects.exists()


# -------------------------------------------------------------- isolation


def test_another_accounts_session_is_not_found_anywhere(logged_in, account, other_account):
    theirs, _ = _session(other_account)
    _planned(theirs, "mallory-req-1")
    mine, _ = _session(account)
    assert logged_in.get(_url(theirs)).status_code == 404
    assert logged_in.post(reverse("session_compact", args=[theirs.pk])).status_code == 404
    assert not mm.MemoryJob.objects.filter(conversation=theirs, state="pending").exists()
    # Their request id through my session: no such request here.
    assert logged_in.get(_url(mine, request="mallory-req-1")).status_code == 404
    assert logged_in.get(_url(mine, request="no-such-request")).status_code == 404
    body = logged_in.get(_url(mine)).content.decode()
    assert "mallory" not in body


# ------------------------------------------------------------------ queries


def test_the_page_takes_a_bounded_number_of_queries(
    logged_in, account, django_assert_max_num_queries
):
    conversation, _ = _session(account, turns=50, requests=30)
    _planned(conversation, "alice-req-29")
    turns = list(conversation.turns.order_by("position"))
    tags = [mm.Tag.objects.create(conversation=conversation, name=f"topic-{n}") for n in range(5)]
    mm.TurnTag.objects.bulk_create(
        [mm.TurnTag(turn=t, tag=tags[t.position % 5]) for t in turns if t.position]
    )
    for n in range(1, 25):
        segment = mm.Segment.objects.create(
            conversation=conversation, start_position=n, end_position=n, summary=f"s{n}"
        )
        mm.SegmentTag.objects.create(segment=segment, tag=tags[n % 5])
    for n in range(2, 20):
        mm.MemoryJob.objects.create(conversation=conversation, kind=f"k{n}")
    with django_assert_max_num_queries(26):
        response = logged_in.get(_url(conversation, request="alice-req-29"))
    assert response.status_code == 200
    assert len(response.context["detail"].turns.object_list) == 50
