"""The sessions list (search, filters, sort, pages) and a session's requests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet

from memory_app.models import Conversation, MemoryJob
from memory_app.services.jobs import ACTIVE
from telemetry_app.models import RequestLog, Rollup
from telemetry_app.selectors.common import PROXY
from vcloud.accounts.models import Account

SESSIONS_PER_PAGE = 25
SESSION_SORTS = {
    "updated": "updated_at",
    "created": "created_at",
    "title": "title",
    "turns": "turn_count",
    "requests": "request_count",
    "client": "client_tokens",
    "upstream": "upstream_tokens",
}


@dataclass(frozen=True, slots=True)
class SessionFilters:
    q: str = ""
    key_id: int | None = None
    format: str = ""
    model: str = ""
    start: date | None = None
    end: date | None = None
    sort: str = "-updated"


def conversations_filtered(*, account: Account, filters: SessionFilters) -> QuerySet[Conversation]:
    rows = Conversation.objects.filter(account=account).select_related("vckey")
    if filters.q:
        rows = rows.filter(Q(title__icontains=filters.q) | Q(session_id__icontains=filters.q))
    if filters.key_id:
        rows = rows.filter(vckey_id=filters.key_id)
    if filters.format:
        rows = rows.filter(format=filters.format)
    if filters.model:
        rows = rows.filter(model=filters.model)
    if filters.start:
        rows = rows.filter(updated_at__gte=datetime.combine(filters.start, time.min, UTC))
    if filters.end:
        end = datetime.combine(filters.end + timedelta(days=1), time.min, UTC)
        rows = rows.filter(updated_at__lt=end)
    name = filters.sort.removeprefix("-")
    column = SESSION_SORTS.get(name, "updated_at")
    descending = filters.sort.startswith("-") or name not in SESSION_SORTS
    return rows.order_by(f"-{column}" if descending else column, "-pk")


def sessions_page(*, account: Account, filters: SessionFilters, page: Any) -> Page:
    """A page of the account's conversations, each with ``pending_jobs`` set."""
    found = Paginator(conversations_filtered(account=account, filters=filters), SESSIONS_PER_PAGE)
    result = found.get_page(page)
    rows = list(result.object_list)
    pending = pending_jobs_by_conversation([c.pk for c in rows])
    for conversation in rows:
        conversation.pending_jobs = pending.get(conversation.pk, 0)  # type: ignore[attr-defined]
    result.object_list = rows
    return result


def pending_jobs_by_conversation(conversation_ids: Iterable[int]) -> dict[int, int]:
    """Pending and running memory jobs per conversation, in one query."""
    rows = (
        MemoryJob.objects.filter(conversation_id__in=list(conversation_ids), state__in=ACTIVE)
        .values("conversation_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["conversation_id"]: row["n"] for row in rows}


def models_for_account(*, account: Account) -> list[str]:
    """Models the account's requests used (from the rollups), for filter menus."""
    return list(
        Rollup.objects.filter(account=account, component=PROXY)
        .exclude(model="")
        .values_list("model", flat=True)
        .distinct()
        .order_by("model")
    )


def conversation_for_account(*, account: Account, conversation_id: int) -> Conversation | None:
    return (
        Conversation.objects.filter(account=account, pk=conversation_id)
        .select_related("vckey")
        .first()
    )


def requests_for_conversation(*, conversation: Conversation, limit: int = 100) -> list[RequestLog]:
    return list(
        RequestLog.objects.filter(account_id=conversation.account_id, conversation=conversation)
        .select_related("vckey")
        .order_by("-created_at")[:limit]
    )
