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
from collections import OrderedDict
from datetime import date
from typing import Any

import numpy as np
import orjson
from django.db.models import Count, Max

from memory_app import selectors
from memory_app.config import config_for
from memory_app.embedding import embedder
from memory_app.engine import temporal, tokens
from memory_app.engine.assembly import plan_payload
from memory_app.engine.inbound import InboundTagger
from memory_app.engine.retrieval import RetrievalIndex, expand_to_turns
from memory_app.engine.types import MemoryUnit, PayloadPlan, PlanInputs, Query, TurnView
from memory_app.engine.vectors import vector_from_bytes
from memory_app.models import Conversation, Segment, Tag, TagSummary, Turn
from proxy_app.formats.types import Exchange

_CACHE_MAX = 64
_indexes: OrderedDict[tuple[Any, ...], tuple[RetrievalIndex, list[MemoryUnit], Any]] = OrderedDict()
_lock = threading.Lock()


def payload_plan_for_request(
    *, account_id: int, conversation_id: int, exchange: Exchange, ceiling: int, cache_aware: bool
) -> PayloadPlan | None:
    """The plan for this request, or ``None`` to forward it unchanged."""
    conversation = (
        Conversation.objects.select_related("account")
        .filter(pk=conversation_id, account_id=account_id)
        .first()
    )
    if conversation is None or not exchange.turns:
        return None
    encoding = tokens.encoding_for(exchange.format, exchange.model)
    views = _views(conversation, exchange, encoding)
    fixed = _fixed_tokens(exchange, encoding)
    watermark = min(conversation.watermark, max(0, len(views) - 1))
    if watermark == 0:
        # Nothing compacted yet (a first request bringing its whole history, or
        # a conversation still under the ceiling): forward it as sent; the
        # memory job compacts in the background.
        return None
    index, units, tag_matrix = _index(conversation)
    query = _query(conversation, views, index, tag_matrix)
    scored = expand_to_turns(index.search(query, limit=60), units) if units else []
    config = config_for(conversation.account.memory_settings)
    return plan_payload(
        PlanInputs(
            ceiling=ceiling,
            fixed_tokens=fixed,
            turns=views,
            watermark=watermark,
            count=lambda text: tokens.count_text(text, encoding),
            protected_turns=config.protected_turns,
            scored=scored,
            units={u.key: u for u in units if u.start_position < len(views) or u.kind != "turn"},
            topic_hint=_topic_hint(conversation),
            stable_summaries=[u for u in units if u.kind == "tag_summary"],
            cache_aware=cache_aware,
        )
    )


def _views(conversation: Conversation, exchange: Exchange, encoding: str) -> list[TurnView]:
    """The history as sent; session dates from the stored turns at the same positions."""
    dates = dict(
        Turn.objects.filter(conversation=conversation, replaced=False).values_list(
            "position", "session_date"
        )
    )
    return [
        TurnView(
            position=i,
            role=t.role,
            text=t.text,
            tokens=tokens.count_item(exchange.format, t.item, encoding),
            session_date=dates.get(i),
            tool_calls=list(t.tool_call_ids),
            tool_results=list(t.tool_result_ids),
        )
        for i, t in enumerate(exchange.turns)
    ]


def _fixed_tokens(exchange: Exchange, encoding: str) -> int:
    tools = orjson.dumps(exchange.tools).decode() if exchange.tools else ""
    return tokens.count_text(exchange.system, encoding) + tokens.count_text(tools, encoding)


def _state_key(conversation: Conversation) -> tuple[Any, ...]:
    turns = Turn.objects.filter(conversation=conversation).aggregate(n=Count("id"), m=Max("id"))
    segments = Segment.objects.filter(conversation=conversation).aggregate(
        n=Count("id"), m=Max("id")
    )
    summaries = TagSummary.objects.filter(conversation=conversation).aggregate(m=Max("updated_at"))
    tagged = Turn.objects.filter(conversation=conversation, tagged=True).count()
    return (
        conversation.pk,
        conversation.watermark,
        turns["n"],
        turns["m"],
        tagged,
        segments["n"],
        segments["m"],
        summaries["m"],
    )


def _index(conversation: Conversation) -> tuple[RetrievalIndex, list[MemoryUnit], Any]:
    key = _state_key(conversation)
    with _lock:
        if key in _indexes:
            _indexes.move_to_end(key)
            return _indexes[key]
    built = _index_build(conversation)
    with _lock:
        _indexes[key] = built
        while len(_indexes) > _CACHE_MAX:
            _indexes.popitem(last=False)
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
    latest = next((v for v in reversed(views) if v.role == "user"), views[-1])
    model = embedder()
    vector = model.encode([latest.text[:2000] or "?"])[0]
    names, matrix = tag_matrix
    tags = InboundTagger().tags_for(latest.text, names, matrix, model) if matrix is not None else []
    today = latest.session_date or date.today()
    return Query(
        text=latest.text,
        tags=tags,
        embedding=vector,
        date_range=temporal.date_range_for(latest.text, today),
        order_hint=temporal.order_hint_for(latest.text),
    )


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
