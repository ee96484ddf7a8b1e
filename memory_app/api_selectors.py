"""Account-scoped reads behind the memory API and the CLI."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from memory_app.errors import ConversationNotFound, RequestContextNotFound
from memory_app.models import (
    Conversation,
    MemoryJob,
    RequestContext,
    Segment,
    Tag,
    TagSummary,
)
from memory_app.services.jobs import pending_jobs
from memory_app.services.search import quotes_search
from telemetry_app.models import RequestLog
from vcloud.accounts.models import Account

LIMIT_MAX = 1000


def conversations_for_account(
    *, account: Account, session: str = "", limit: int = 100
) -> QuerySet[Conversation]:
    rows = Conversation.objects.filter(account=account)
    if session:
        rows = rows.filter(session_id=session)
    return rows.order_by("-updated_at")[: max(1, min(limit, LIMIT_MAX))]


def conversation_get(*, account: Account, conversation_id: int) -> Conversation:
    conversation = Conversation.objects.filter(account=account, pk=conversation_id).first()
    if conversation is None:
        raise ConversationNotFound(conversation_id)
    return conversation


def conversation_detail(*, account: Account, conversation_id: int) -> dict[str, Any]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    fields = {
        f: getattr(c, f)
        for f in [
            "id",
            "session_id",
            "title",
            "format",
            "model",
            "created_at",
            "updated_at",
            "turn_count",
            "request_count",
            "client_tokens",
            "upstream_tokens",
            "watermark",
        ]
    }
    return {
        **fields,
        "turns": c.turns.filter(replaced=False).count(),
        "segments": c.segments.count(),
        "tag_summaries": c.tag_summaries.count(),
        "facts": c.facts.count(),
        "tags": c.tags.count(),
        "pending_jobs": pending_jobs(c.pk),
        "jobs": list(MemoryJob.objects.filter(conversation=c).order_by("-created_at")[:10]),
    }


def requests_for_conversation(
    *, account: Account, conversation_id: int, limit: int = 100
) -> QuerySet[RequestLog]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    return RequestLog.objects.filter(account=account, conversation=c).order_by("-created_at")[
        : max(1, min(limit, LIMIT_MAX))
    ]


def request_context_get(
    *, account: Account, conversation_id: int, request_id: str
) -> RequestContext:
    c = conversation_get(account=account, conversation_id=conversation_id)
    found = RequestContext.objects.filter(conversation=c, request_id=request_id).first()
    if found is None:
        raise RequestContextNotFound(request_id)
    return found


def quotes_for_conversation(
    *, account: Account, conversation_id: int, text: str, limit: int
) -> list[dict[str, Any]]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    return quotes_search(conversation=c, text=text, limit=limit)


def tags_for_conversation(*, account: Account, conversation_id: int) -> list[dict[str, Any]]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    return [
        {
            "name": t.name,
            "turn_count": t.turn_count,
            "description": t.description,
            "aliases": [a.alias for a in t.aliases.all()],
        }
        for t in Tag.objects.filter(conversation=c)
        .prefetch_related("aliases")
        .order_by("-turn_count", "name")
    ]


def segments_for_conversation(*, account: Account, conversation_id: int) -> list[dict[str, Any]]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    return [
        {
            "id": s.pk,
            "start_position": s.start_position,
            "end_position": s.end_position,
            "level": s.level,
            "summary": s.summary,
            "tokens": s.tokens,
            "summary_tokens": s.summary_tokens,
            "session_date": s.session_date,
            "tags": [t.name for t in s.tags.all()],
        }
        for s in Segment.objects.filter(conversation=c).prefetch_related("tags")
    ]


def tag_summaries_for_conversation(
    *, account: Account, conversation_id: int
) -> list[dict[str, Any]]:
    c = conversation_get(account=account, conversation_id=conversation_id)
    return [
        {
            "tag": s.tag.name,
            "summary": s.summary,
            "tokens": s.tokens,
            "covers_until": s.covers_until,
        }
        for s in TagSummary.objects.filter(conversation=c).select_related("tag")
    ]
