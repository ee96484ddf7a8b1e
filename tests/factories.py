"""Explicit builders for test data. Each returns saved rows."""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from memory_app import models as mm
from telemetry_app.models import Component, LLMCall, RequestLog
from telemetry_app.rollups import rollups_add
from vcloud.accounts.models import Account, VCKey
from vcloud.accounts.services import account_for_user, vckey_create


def account_create(
    *, username: str, password: str = "correct-horse-battery", **extra: Any
) -> Account:
    user = get_user_model().objects.create_user(
        username, email=f"{username}@example.com", password=password, **extra
    )
    return account_for_user(user)


def vckey_for(account: Account, name: str = "default") -> tuple[VCKey, str]:
    return vckey_create(account=account, name=name)


def conversation_create(
    account: Account, *, session_id: str = "s1", turns: int = 0
) -> mm.Conversation:
    conversation = mm.Conversation.objects.create(
        account=account,
        session_id=session_id,
        format="anthropic",
        model="claude-sonnet-4-5",
        title=f"{account.name} {session_id}",
    )
    for i in range(turns):
        turn_create(conversation, position=i, text=f"{account.name} turn {i}")
    return conversation


def turn_create(
    conversation: mm.Conversation, *, position: int, text: str, role: str = ""
) -> mm.Turn:
    role = role or ("user" if position % 2 == 0 else "assistant")
    content = {"role": role, "content": text}
    return mm.Turn.objects.create(
        conversation=conversation,
        position=position,
        role=role,
        content=content,
        text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        token_count=len(text) // 4,
        session_date=dt.date(2026, 1, 1),
    )


def memory_graph_create(conversation: mm.Conversation) -> dict[str, Any]:
    """One row of every memory model, linked the way the engine links them."""
    first = conversation.turns.order_by("position").first() or turn_create(
        conversation, position=0, text="I moved to Lisbon"
    )
    tag = mm.Tag.objects.create(conversation=conversation, name="travel", turn_count=1)
    mm.TagAlias.objects.create(tag=tag, alias="trips")
    mm.TurnTag.objects.create(turn=first, tag=tag)
    segment = mm.Segment.objects.create(
        conversation=conversation,
        start_position=0,
        end_position=0,
        summary="Moved to Lisbon.",
        full_text=first.text,
        tokens=5,
        summary_tokens=4,
    )
    mm.SegmentTag.objects.create(segment=segment, tag=tag)
    mm.TagSummary.objects.create(conversation=conversation, tag=tag, summary="Travel plans.")
    old = mm.Fact.objects.create(
        conversation=conversation,
        subject="user",
        verb="lives in",
        object="Porto",
        what="The user lives in Porto.",
        status=mm.FactStatus.SUPERSEDED,
    )
    new = mm.Fact.objects.create(
        conversation=conversation,
        subject="user",
        verb="lives in",
        object="Lisbon",
        what="The user lives in Lisbon.",
    )
    old.superseded_by = new
    old.save()
    new.turns.add(first)
    new.tags.add(tag)
    mm.FactLink.objects.create(
        conversation=conversation, source=new, target=old, link_type=mm.LinkType.SUPERSEDES
    )
    mm.StoredToolChain.objects.create(
        conversation=conversation,
        start_position=0,
        end_position=1,
        tool_names=["search"],
        items=[{"role": "assistant", "content": []}],
        tokens=10,
    )
    mm.MediaObject.objects.create(
        conversation=conversation,
        turn=first,
        sha256="ab" * 32,
        media_type="image/png",
        byte_size=100,
        width=10,
        height=10,
        path="media/abab.png",
    )
    mm.MemoryJob.objects.create(
        conversation=conversation, kind="process", state=mm.JobState.DONE, progress=1, total=1
    )
    mm.RequestContext.objects.create(
        conversation=conversation,
        request_id=f"req-{conversation.pk}-ctx",
        ceiling=4000,
        planned=True,
        client_tokens=9000,
        upstream_tokens=3800,
        report={"parts": {"fixed": 100, "window": 2000, "recall": 1700, "headroom": 200}},
        created_at=timezone.now(),
    )
    return {"tag": tag, "segment": segment, "fact": new}


def ledger_create(account: Account, conversation: mm.Conversation | None = None) -> LLMCall:
    now = timezone.now()
    request = RequestLog.objects.create(
        account=account,
        conversation=conversation,
        request_id=f"req-{account.pk}-{now.timestamp()}",
        format="anthropic",
        path="/v1/messages",
        model="claude-sonnet-4-5",
        status=200,
        client_tokens=1000,
        upstream_tokens=400,
        created_at=now,
    )
    call = LLMCall.objects.create(
        account=account,
        conversation=conversation,
        component=Component.PROXY_UPSTREAM,
        provider="anthropic",
        model="claude-sonnet-4-5",
        input_tokens=400,
        output_tokens=20,
        cost=Decimal("0.0015"),
        created_at=now,
    )
    rollups_add(requests=[_row(request)], calls=[_row(call)])
    return call


def _row(obj: Any) -> dict[str, Any]:
    """A saved row as the plain dict the writer inserts (column name → value)."""
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def exchange_record(
    account: Account,
    key: VCKey,
    conversation: mm.Conversation | None = None,
    *,
    request_id: str,
    **extra: Any,
) -> Any:
    """One proxied request as the writer records it (``proxy_app.services``): by
    default a priced 1000-token claude-sonnet-4-5 call the client sent as 3000."""
    from proxy_app.services import ExchangeRecord

    fields: dict[str, Any] = {
        "format": "anthropic",
        "provider": "anthropic",
        "path": "/v1/messages",
        "model": "claude-sonnet-4-5",
        "stream": False,
        "status": 200,
        "created_at": timezone.now(),
        "client_tokens": 3000,
        "upstream_tokens": 1000,
        "output_tokens": 100,
        **extra,
    }
    return ExchangeRecord(
        request_id=request_id,
        account_id=account.pk,
        key_id=key.pk,
        conversation_id=conversation.pk if conversation else None,
        **fields,
    )


def records_write(records: list[Any]) -> None:
    """Price and persist records the way the background writer does."""
    from proxy_app.services import records_persist, records_price

    records_price(records)
    records_persist(records)
