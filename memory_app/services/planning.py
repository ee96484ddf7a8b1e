"""Planning one request's upstream payload from the conversation's memory.

``payload_plan_for_request`` runs off the event loop (the proxy calls it through
``proxy_app.db.db_call``) when a request may be over its ceiling. It counts the
history as sent, and when it does not fit (or part of it is compacted) builds
the retrieval query for the newest user turn, searches the conversation's
stored turns, segments and tag summaries, and asks the engine for the plan
(``engine.assembly``). It returns ``None`` when the request should go upstream
unchanged.

The retrieval index of a conversation is cached in the process, keyed by the
state it was built from (turns, watermark, segments, tag summaries), so
consecutive requests reuse it until the memory job changes something.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import date
from typing import Any, TypeVar

import numpy as np
import orjson
from django.conf import settings
from django.db.models import Count, Max, OuterRef, QuerySet, Subquery

from memory_app import selectors
from memory_app.config import config_for
from memory_app.embedding import embedder
from memory_app.engine import dates, temporal, tokens
from memory_app.engine.assembly import plan_payload
from memory_app.engine.dates import stamps_strip
from memory_app.engine.inbound import InboundTagger
from memory_app.engine.retrieval import RetrievalIndex, expand_to_turns
from memory_app.engine.types import (
    MemoryUnit,
    PayloadPlan,
    PlanInputs,
    Query,
    Scored,
    TurnView,
)
from memory_app.engine.vectors import vector_from_bytes
from memory_app.models import Conversation, Segment, Tag, TagSummary, Turn
from memory_app.services.jobs import pending_jobs
from proxy_app.formats.types import Exchange

_CACHE_MAX = 64
Built = TypeVar("Built")
HARD_WAIT_POLL = 0.1
_indexes: OrderedDict[tuple[Any, ...], tuple[RetrievalIndex, list[MemoryUnit], Any]] = OrderedDict()
_hints: OrderedDict[tuple[Any, ...], list[tuple[str, int, str]]] = OrderedDict()
_lock = threading.Lock()


def payload_plan_for_request(
    *, account_id: int, conversation_id: int, exchange: Exchange, ceiling: int, cache_aware: bool
) -> PayloadPlan | None:
    """The plan for this request (``passthrough`` to forward it unchanged), or
    ``None`` when the conversation is not the account's or has no turns."""
    conversation = (
        _with_state(Conversation.objects.select_related("account"))
        .filter(pk=conversation_id, account_id=account_id)
        .first()
    )
    if conversation is None or not exchange.turns:
        return None
    encoding = tokens.encoding_for(exchange.format, exchange.model)
    views = _views(conversation, exchange, encoding)
    fixed = fixed_tokens(exchange, encoding)
    config = config_for(conversation.account.memory_settings)
    waited = _hard_wait(conversation, views, fixed, ceiling, config.hard_threshold)
    if waited is not None:  # the memory job ran meanwhile: read its state again
        conversation = _with_state(Conversation.objects.select_related("account")).get(
            pk=conversation.pk
        )
    watermark = min(conversation.watermark, max(0, len(views) - 1))
    if watermark == 0:
        # Nothing compacted yet (a first request bringing its whole history, or
        # a conversation still under the ceiling): forward it as sent; the
        # memory job compacts in the background.
        plan = PayloadPlan(passthrough=True, reasons=["nothing compacted yet: forwarded as sent"])
        plan.report = _report(plan, [], {}, views, fixed, ceiling, None)
        return plan
    state = _state_key(conversation)
    index, units, tag_matrix = conversation_index(conversation, state=state)
    query = _query(conversation, views, index, tag_matrix)
    scored = expand_to_turns(index.search(query, limit=60), units) if units else []
    usable = {u.key: u for u in units if u.start_position < len(views) or u.kind != "turn"}
    plan = plan_payload(
        PlanInputs(
            ceiling=ceiling,
            fixed_tokens=fixed,
            turns=views,
            watermark=watermark,
            count=lambda text: tokens.count_text(text, encoding),
            protected_turns=config.protected_turns,
            scored=scored,
            units=usable,
            topic_hint=_topic_hint_cached(conversation, state),
            stable_summaries=[u for u in units if u.kind == "tag_summary"],
            cache_aware=cache_aware,
            window_share=config.window_share,
            stable_share=config.stable_share,
            recall_share=config.recall_share,
            recall_confident=config.recall_confidence * index.settings.top_score(),
            recall_reach=config.recall_reach * index.settings.top_score(),
            tag_rules=[(r.pattern, r.priority, r.ttl_turns) for r in config.tag_rules],
        )
    )
    if waited is not None:
        plan.reasons.insert(0, waited)
    plan.report = _report(plan, scored, usable, views, fixed, ceiling, query)
    return plan


def _hard_wait(
    conversation: Conversation, views: list[TurnView], fixed: int, ceiling: int, hard: float
) -> str | None:
    """Over the hard threshold with memory work under way, wait for it (at most
    ``VC_HARD_WAIT_SECONDS``) so the plan sees the compaction it needs (the
    caller reloads the conversation). Returns the reason to record, or None."""
    window = sum(v.tokens for v in views[conversation.watermark :])
    if (fixed + window) / ceiling < hard or not pending_jobs(conversation.pk):
        return None
    started = time.monotonic()
    deadline = started + settings.VC_HARD_WAIT_SECONDS
    while pending_jobs(conversation.pk) and time.monotonic() < deadline:
        time.sleep(HARD_WAIT_POLL)
    waited = time.monotonic() - started
    done = "done" if not pending_jobs(conversation.pk) else "still running"
    return f"over the hard threshold: waited {waited:.1f} s for compaction ({done})"


def _report(
    plan: PayloadPlan,
    scored: list[Scored],
    units: dict[str, MemoryUnit],
    views: list[TurnView],
    fixed: int,
    ceiling: int,
    query: Query | None,
) -> dict[str, Any]:
    """The plan as the request's context record keeps it (``RequestContext.report``)."""
    client = fixed + sum(v.tokens for v in views)
    parts = dict(plan.tokens_by_part) or {"fixed": fixed, "window": client - fixed}
    used = sum(n for k, n in parts.items() if k != "headroom")
    parts["headroom"] = max(0, ceiling - used)
    recalled = {key: (n, why) for key, n, why in plan.recalled}
    by_key = {s.key: s for s in scored}
    brought = set(plan.recalled_hits.values())
    return {
        "ceiling": ceiling,
        "client_tokens": client,
        "upstream_tokens": client if plan.passthrough else used,
        "parts": parts,
        "kept": _ranges(plan.kept_positions),
        "dropped": _ranges(plan.dropped_positions),
        "window_start": plan.window_start,
        "window_truncated": plan.window_truncated,
        "recalled": [
            _item(by_key.get(plan.recalled_hits.get(k, k)), units.get(k), k, n, why)
            for k, (n, why) in recalled.items()
        ],
        "left_out": [
            _item(s, units.get(s.key), s.key, 0, "")
            for s in scored[:40]
            if s.key not in recalled and s.key not in brought
        ][:20],
        "query": _query_report(query),
        "stable_left_out": list(plan.stable_left_out),
        "reasons": list(plan.reasons),
    }


def _item(
    hit: Scored | None, unit: MemoryUnit | None, key: str, tokens_used: int, why: str
) -> dict[str, Any]:
    return {
        "key": key,
        "kind": unit.kind if unit else "",
        "tokens": tokens_used or (unit.tokens if unit else 0),
        "why": why or ("; ".join(hit.why) if hit else ""),
        "score": round(float(hit.score), 6) if hit else None,
        "signals": {k: round(float(v), 4) for k, v in hit.signals.items()} if hit else {},
        "ranks": {k: int(v) for k, v in hit.ranks.items()} if hit else {},
        "positions": [unit.start_position, unit.end_position] if unit else None,
        "session_date": unit.session_date.isoformat() if unit and unit.session_date else None,
        "preview": unit.text[:200] if unit else "",
    }


def _query_report(query: Query | None) -> dict[str, Any]:
    if query is None:
        return {}
    span = query.date_range
    return {
        "text": query.text[:300],
        "tags": [[name, round(weight, 3)] for name, weight in query.tags],
        "date_range": [d.isoformat() for d in span] if span else None,
        "order_hint": query.order_hint,
    }


def _ranges(positions: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9] → [[3, 5], [9, 9]]."""
    out: list[list[int]] = []
    for p in sorted(positions):
        if out and p == out[-1][1] + 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return out


def _views(conversation: Conversation, exchange: Exchange, encoding: str) -> list[TurnView]:
    """The history as sent; session dates from the stored turns at the same positions."""
    dates = dict(
        Turn.objects.filter(conversation=conversation, replaced=False).values_list(
            "position", "session_date"
        )
    )
    return history_views(exchange, encoding, dates)


def history_views(
    exchange: Exchange, encoding: str, dates: dict[int, date | None] | None = None
) -> list[TurnView]:
    """The client's history as the planner sees it, each turn counted with
    ``encoding``; ``dates`` gives session dates by position."""
    known = dates or {}
    return [
        TurnView(
            position=i,
            role=t.role,
            text=t.text,
            tokens=tokens.count_item(exchange.format, t.item, encoding),
            session_date=known.get(i),
            tool_calls=list(t.tool_call_ids),
            tool_results=list(t.tool_result_ids),
        )
        for i, t in enumerate(exchange.turns)
    ]


def fixed_tokens(exchange: Exchange, encoding: str) -> int:
    """Tokens of the client's own system prompt and tools."""
    tools = orjson.dumps(exchange.tools).decode() if exchange.tools else ""
    return tokens.count_text(exchange.system, encoding) + tokens.count_text(tools, encoding)


def _with_state(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """``conversations`` annotated with what ``_state_key`` reads, so that the
    request path loads the conversation and its memory state in one query."""

    def of(model: Any, value: Any, **where: Any) -> Subquery:
        rows = model.objects.filter(conversation=OuterRef("pk"), **where).order_by()
        return Subquery(rows.values("conversation").annotate(v=value).values("v"))

    return conversations.annotate(
        state_turns=of(Turn, Count("id")),
        state_turn_max=of(Turn, Max("id")),
        state_tagged=of(Turn, Count("id"), tagged=True),
        state_segments=of(Segment, Count("id")),
        state_segment_max=of(Segment, Max("id")),
        state_summaries=of(TagSummary, Max("updated_at")),
    )


def _state_key(conversation: Conversation) -> tuple[Any, ...]:
    """What the retrieval index and the topic hint were built from: they are
    rebuilt when a turn is stored, tagged or replaced, a segment made or
    removed, a tag summary rewritten, or the watermark moves."""
    if not hasattr(conversation, "state_turns"):
        conversation = _with_state(Conversation.objects.all()).get(pk=conversation.pk)
    return (
        conversation.pk,
        conversation.watermark,
        conversation.state_turns or 0,
        conversation.state_turn_max,
        conversation.state_tagged or 0,
        conversation.state_segments or 0,
        conversation.state_segment_max,
        conversation.state_summaries,
    )


def conversation_index(
    conversation: Conversation, *, state: tuple[Any, ...] | None = None
) -> tuple[RetrievalIndex, list[MemoryUnit], Any]:
    """The conversation's retrieval index (cached until its memory changes),
    its units, and its tag vocabulary's (names, vectors)."""
    return _cached(_indexes, state or _state_key(conversation), lambda: _index_build(conversation))


def _cached(store: OrderedDict[Any, Built], key: Any, build: Callable[[], Built]) -> Built:
    """``store[key]``, built (outside the lock) when missing; the least recently
    used entries go past ``_CACHE_MAX``."""
    with _lock:
        if key in store:
            store.move_to_end(key)
            return store[key]
    built = build()
    with _lock:
        store[key] = built
        while len(store) > _CACHE_MAX:
            store.popitem(last=False)
    return built


def _index_build(conversation: Conversation) -> tuple[RetrievalIndex, list[MemoryUnit], Any]:
    model = embedder()
    units: list[MemoryUnit] = []
    vectors: list[Any] = []

    def add(unit: MemoryUnit, blob: bytes | None, model_name: str) -> None:
        if blob is not None and model_name == model.model_name:
            unit.embedding = len(vectors)
            vectors.append(vector_from_bytes(bytes(blob), model.dimensions))
        units.append(unit)

    turns = selectors.active_turns(conversation)
    tags = selectors.turn_tags(t.pk for t in turns)
    for t in turns:
        unit = MemoryUnit(
            "turn",
            f"t:{t.position}",
            t.text,
            tags.get(t.pk, []),
            t.position,
            t.position,
            t.session_date,
            t.token_count,
        )
        add(unit, t.embedding, t.embedding_model)
    for s in Segment.objects.filter(conversation=conversation).prefetch_related("tags"):
        unit = MemoryUnit(
            "segment",
            f"s:{s.pk}",
            s.summary,
            [g.name for g in s.tags.all()],
            s.start_position,
            s.end_position,
            s.session_date,
            s.summary_tokens,
        )
        add(unit, s.embedding, s.embedding_model)
    for g in TagSummary.objects.filter(conversation=conversation).select_related("tag"):
        unit = MemoryUnit(
            "tag_summary",
            f"g:{g.tag.name}",
            g.summary,
            [g.tag.name],
            0,
            g.covers_until,
            None,
            g.tokens,
        )
        add(unit, g.embedding, g.embedding_model)
    matrix = np.vstack(vectors).astype(np.float32) if vectors else None
    return RetrievalIndex.build(units, matrix), units, _tag_matrix(conversation, model)


def _tag_matrix(conversation: Conversation, model: Any) -> tuple[list[str], Any]:
    rows = [
        (t.name, vector_from_bytes(bytes(t.embedding), model.dimensions))
        for t in Tag.objects.filter(conversation=conversation, embedding_model=model.model_name)
        if t.embedding is not None
    ]
    if not rows:
        return [], None
    return [n for n, _ in rows], np.vstack([v for _, v in rows]).astype(np.float32)


def _query(
    conversation: Conversation, views: list[TurnView], index: RetrievalIndex, tag_matrix: Any
) -> Query:
    """The latest user turn as a query. Its date header says when it is asked
    ("today" for "last week"), not what it is about: it is left out of the text
    that is matched."""
    latest = next((v for v in reversed(views) if v.role == "user"), views[-1])
    text = stamps_strip(latest.text).strip() or latest.text
    model = embedder()
    vector = model.encode([text[:2000] or "?"])[0]
    names, matrix = tag_matrix
    tagger = InboundTagger()
    tags = tagger.tags_for(text, names, matrix, model, vector=vector) if matrix is not None else []
    today = dates.session_date_from_text(latest.text) or latest.session_date or date.today()
    return Query(
        text=text,
        tags=tags,
        embedding=vector,
        date_range=temporal.date_range_for(text, today),
        order_hint=temporal.order_hint_for(text),
    )


def _topic_hint_cached(
    conversation: Conversation, state: tuple[Any, ...]
) -> list[tuple[str, int, str]]:
    """``_topic_hint``, kept per conversation state like the index."""
    return _cached(_hints, state, lambda: _topic_hint(conversation))


def _topic_hint(conversation: Conversation) -> list[tuple[str, int, str]]:
    """Tags with the turns their segments cover: fixed between compactions, so
    the stable block (and the provider's cache prefix) does not move."""
    hint: dict[str, tuple[int, str]] = {}
    for s in Segment.objects.filter(conversation=conversation).prefetch_related("tags"):
        span = s.end_position - s.start_position + 1
        for tag in s.tags.all():
            turns, _ = hint.get(tag.name, (0, ""))
            hint[tag.name] = (turns + span, tag.description)
    return [(name, turns, description) for name, (turns, description) in hint.items()]


def request_preview(
    *, conversation: Conversation, message: str, ceiling: int | None = None
) -> tuple[PayloadPlan | None, dict[str, Any]]:
    """The plan and upstream body a new user ``message`` would get now: the
    stored history (as the client would resend it) plus the message, in the
    conversation's own format (``vc retrieve`` / ``vc transform``)."""
    from proxy_app.formats import ADAPTERS, HISTORY_FIELD
    from proxy_app.formats.recall import planned_body

    fmt = conversation.format if conversation.format in ADAPTERS else "anthropic"
    items = [t.content for t in selectors.active_turns(conversation)]
    if fmt == "gemini":
        items.append({"role": "user", "parts": [{"text": message}]})
    else:
        items.append({"role": "user", "content": message})
    body: dict[str, Any] = {HISTORY_FIELD[fmt]: items}
    if fmt != "gemini":
        body["model"] = conversation.model or "model"
    if fmt == "anthropic":
        body["max_tokens"] = 1024
    adapter = ADAPTERS[fmt]
    exchange = adapter.parse_request(body, model=conversation.model or None)
    plan = payload_plan_for_request(
        account_id=conversation.account_id,
        conversation_id=conversation.pk,
        exchange=exchange,
        ceiling=ceiling or conversation.account.context_ceiling,
        cache_aware=conversation.account.cache_aware_layout,
    )
    if plan is None or plan.passthrough:
        return plan, body
    return plan, planned_body(adapter, exchange, plan)
