"""The proxy's database side: conversations and the batched record of exchanges.

Everything here is sync and runs off the event loop (``proxy_app.db``). The hot
path never waits for ``records_persist``: the background writer calls it with a
batch of records every fraction of a second.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from memory_app.locks import session_lock
from memory_app.models import Conversation, RequestContext, Turn
from proxy_app.bulk import bulk_insert
from telemetry_app.models import Component, LLMCall, RequestLog
from telemetry_app.pricing import call_cost, price_lookup
from telemetry_app.rollups import rollups_add
from vcloud.accounts.models import VCKey

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TurnRecord:
    position: int
    role: str
    item: dict[str, Any]
    text: str
    content_hash: str
    token_count: int = 0


@dataclass(slots=True)
class ExchangeRecord:
    """What one proxied request leaves behind, written in a batch later."""

    request_id: str
    account_id: int
    key_id: int
    conversation_id: int | None
    format: str
    provider: str
    path: str
    model: str
    stream: bool
    status: int
    created_at: datetime
    turns: list[TurnRecord] = field(default_factory=list)
    replaced_from: int | None = None  # stored turns from here on were edited by the client
    turn_count: int = 0  # active turns of the conversation after this exchange
    client_tokens: int = 0
    upstream_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    baseline_cost: Decimal = Decimal(0)  # the full history the client sent, same model
    priced: bool = False
    overhead_ms: float = 0.0
    upstream_ms: float = 0.0
    passthrough: bool = False
    ledger: bool = True  # an LLM call (not count_tokens or a model list)
    error: str = ""
    context: dict[str, Any] | None = None  # the planner's record of the window (RequestContext)


@dataclass(frozen=True, slots=True)
class ConversationRow:
    id: int
    hashes: list[str]


def conversation_hashes(conversation_id: int) -> list[str]:
    return list(
        Turn.objects.filter(conversation_id=conversation_id, replaced=False)
        .order_by("position")
        .values_list("content_hash", flat=True)
    )


def conversation_find(*, account_id: int, conversation_id: int) -> ConversationRow | None:
    exists = Conversation.objects.filter(pk=conversation_id, account_id=account_id).exists()
    return (
        ConversationRow(conversation_id, conversation_hashes(conversation_id)) if exists else None
    )


def conversation_for_session(
    *, account_id: int, key_id: int, session_id: str, format: str, model: str
) -> ConversationRow:
    """The conversation of (account, client session id), created on first sight
    (under the session's lock: web workers racing on a new session id create
    it once)."""
    found = _session_conversation(account_id, session_id)
    if found is None:
        with session_lock(account_id, session_id):
            found = _session_conversation(account_id, session_id)
            if found is None:
                conversation = Conversation.objects.create(
                    account_id=account_id,
                    vckey_id=key_id,
                    session_id=session_id,
                    format=format,
                    model=model,
                    title=session_id[:200],
                )
                return ConversationRow(conversation.pk, [])
    return ConversationRow(found, conversation_hashes(found))


def _session_conversation(account_id: int, session_id: str) -> int | None:
    return (
        Conversation.objects.filter(account_id=account_id, session_id=session_id)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )


def conversation_for_fingerprint(
    *,
    account_id: int,
    key_id: int,
    fingerprint: str,
    format: str,
    model: str,
    title: str,
    reuse: bool,
) -> ConversationRow:
    """The newest conversation with this opening (when ``reuse``), else a new one."""
    if reuse:
        found = (
            Conversation.objects.filter(account_id=account_id, fingerprint=fingerprint)
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
        )
        if found is not None:
            return ConversationRow(found, conversation_hashes(found))
    conversation = Conversation.objects.create(
        account_id=account_id,
        vckey_id=key_id,
        fingerprint=fingerprint,
        format=format,
        model=model,
        title=title[:200],
    )
    return ConversationRow(conversation.pk, [])


@transaction.atomic
def records_persist(records: list[ExchangeRecord]) -> None:
    """Write a batch: turns, request log, ledger, counters. Idempotent per request id."""
    done = set(
        RequestLog.objects.filter(request_id__in=[r.request_id for r in records]).values_list(
            "request_id", flat=True
        )
    )
    records = [r for r in records if r.request_id not in done]
    if not records:
        return
    _turns_persist(records)
    requests = [_request_row(r) for r in records]
    bulk_insert(RequestLog, requests)
    bulk_insert(RequestContext, [_context_row(r) for r in records if r.context])
    calls = [_ledger_row(r) for r in records if r.ledger and r.status]
    bulk_insert(LLMCall, calls)
    rollups_add(requests=requests, calls=calls)
    _counters_update(records)


# The client's own prompt caching, estimated as the shared benchmark's billing
# model does (OpenAI-style automatic prefix caching): a prefix shared with the
# previous request counts from 1,024 tokens, in steps of 128.
CLIENT_CACHE_MIN = 1_024
CLIENT_CACHE_STEP = 128


def records_price(records: list[ExchangeRecord]) -> None:
    """Set each record's cost from the price catalog (read once per process),
    and its baseline: the client's own full-history request to the same model,
    with the prompt-cache hits that client would have had (``client_cached``),
    so that savings are never overstated."""
    shared = _client_prefixes(records)
    for record in records:
        price = price_lookup(record.model) if record.model else None
        record.priced = price is not None
        record.cost = call_cost(
            price,
            input_tokens=record.upstream_tokens,
            output_tokens=record.output_tokens,
            cache_read_tokens=record.cached_tokens,
            cache_write_tokens=record.cache_write_tokens,
        )
        record.baseline_cost = call_cost(
            price,
            input_tokens=record.client_tokens,
            output_tokens=record.output_tokens,
            cache_read_tokens=client_cached(shared.get(record.request_id, 0)),
            cache_write_tokens=0,
        )


def client_cached(shared_tokens: int) -> int:
    """Tokens a provider caches of a prefix of ``shared_tokens`` (the billing model)."""
    if shared_tokens < CLIENT_CACHE_MIN:
        return 0
    return shared_tokens // CLIENT_CACHE_STEP * CLIENT_CACHE_STEP


def _client_prefixes(records: list[ExchangeRecord]) -> dict[str, int]:
    """Per request, the tokens of its client body that repeat the client's
    previous request in the conversation: all of that request when the history
    only grew (a client resends its whole history), nothing after an edit."""
    ids = {r.conversation_id for r in records if r.conversation_id is not None and r.ledger}
    latest = (
        RequestLog.objects.filter(
            conversation_id__in=ids, status__gte=200, status__lt=400, model__gt=""
        )
        .order_by()
        .values("conversation_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    previous: dict[int | None, int] = dict(
        RequestLog.objects.filter(id__in=list(latest)).values_list(
            "conversation_id", "client_tokens"
        )
    )
    shared: dict[str, int] = {}
    for record in records:
        if record.conversation_id is None or not record.ledger:
            continue
        before = previous.get(record.conversation_id, 0)
        if record.replaced_from is None:
            shared[record.request_id] = min(before, record.client_tokens)
        if 200 <= record.status < 400 and record.model:  # it reached the provider
            previous[record.conversation_id] = record.client_tokens
    return shared


def _turns_persist(records: list[ExchangeRecord]) -> None:
    """Insert new turns; mark edited ones replaced, in request order, with one
    UPDATE per conversation for rows stored before this batch."""
    rows: list[dict[str, Any]] = []
    first_replaced: dict[int, int] = {}  # conversation → lowest replaced position
    # Rows of this batch still active, per conversation, in position order.
    active: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        conversation_id = record.conversation_id
        if conversation_id is None:
            continue
        stack = active[conversation_id]
        if record.replaced_from is not None:
            cut = record.replaced_from
            first_replaced[conversation_id] = min(cut, first_replaced.get(conversation_id, cut))
            while stack and stack[-1]["position"] >= cut:
                stack.pop()["replaced"] = True
        day = record.created_at.date()
        new = [
            {
                "conversation_id": conversation_id,
                "position": t.position,
                "role": t.role,
                "content": t.item,
                "text": t.text,
                "content_hash": t.content_hash,
                "token_count": t.token_count,
                "session_date": day,
                "replaced": False,
                "created_at": record.created_at,
            }
            for t in record.turns
        ]
        stack.extend(new)
        rows.extend(new)
    for conversation_id, cut in first_replaced.items():
        Turn.objects.filter(
            conversation_id=conversation_id, position__gte=cut, replaced=False
        ).update(replaced=True)
    bulk_insert(Turn, rows)


def _request_row(r: ExchangeRecord) -> dict[str, Any]:
    return {
        "account_id": r.account_id,
        "vckey_id": r.key_id,
        "conversation_id": r.conversation_id,
        "request_id": r.request_id,
        "format": r.format,
        "path": r.path[:300],
        "model": r.model[:200],
        "stream": r.stream,
        "status": r.status,
        "client_tokens": r.client_tokens,
        "upstream_tokens": r.upstream_tokens,
        "cached_tokens": r.cached_tokens,
        "output_tokens": r.output_tokens,
        "cost": r.cost,
        "baseline_cost": r.baseline_cost,
        "overhead_ms": r.overhead_ms,
        "upstream_ms": r.upstream_ms,
        "passthrough": r.passthrough,
        "error": r.error,
        "created_at": r.created_at,
    }


def _context_row(r: ExchangeRecord) -> dict[str, Any]:
    assert r.context is not None
    return {
        **r.context,
        "conversation_id": r.conversation_id,
        "request_id": r.request_id,
        "created_at": r.created_at,
    }


def _ledger_row(r: ExchangeRecord) -> dict[str, Any]:
    return {
        "account_id": r.account_id,
        "conversation_id": r.conversation_id,
        "request_id": r.request_id,
        "component": Component.PROXY_UPSTREAM.value,
        "provider": r.provider,
        "model": r.model[:200],
        "input_tokens": r.upstream_tokens,
        "cached_tokens": r.cached_tokens,
        "cache_write_tokens": r.cache_write_tokens,
        "output_tokens": r.output_tokens,
        "cost": r.cost,
        "priced": r.priced,
        "duration_ms": r.upstream_ms,
        "created_at": r.created_at,
    }


def _counters_update(records: list[ExchangeRecord]) -> None:
    keys: dict[int, list[ExchangeRecord]] = defaultdict(list)
    conversations: dict[int, list[ExchangeRecord]] = defaultdict(list)
    for record in records:
        keys[record.key_id].append(record)
        if record.conversation_id is not None:
            conversations[record.conversation_id].append(record)
    for key_id, rows in keys.items():
        VCKey.objects.filter(pk=key_id).update(
            request_count=F("request_count") + len(rows),
            last_used_at=max(r.created_at for r in rows),
        )
    for conversation_id, rows in conversations.items():
        Conversation.objects.filter(pk=conversation_id).update(
            request_count=F("request_count") + len(rows),
            client_tokens=F("client_tokens") + sum(r.client_tokens for r in rows),
            upstream_tokens=F("upstream_tokens") + sum(r.upstream_tokens for r in rows),
            turn_count=max(r.turn_count for r in rows),
            model=rows[-1].model[:200],
            updated_at=timezone.now(),
        )
