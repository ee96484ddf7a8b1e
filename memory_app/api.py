"""Memory routes of the JSON API: conversations, their requests, tags,
segments and tag summaries. Every query goes through ``request.auth`` (the
caller's account); another account's id is a 404, never a row."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from memory_app import api_selectors as sel
from memory_app.schemas import (
    ConversationDetailOut,
    ConversationOut,
    QuoteOut,
    RequestContextOut,
    RequestOut,
    SearchIn,
    SegmentOut,
    TagOut,
    TagSummaryOut,
)

router = Router(tags=["memory"])


@router.get("", response=list[ConversationOut])
def list_conversations(request: HttpRequest, session: str = "", limit: int = 100) -> object:
    return sel.conversations_for_account(account=request.auth, session=session, limit=limit)


@router.get("/{conversation_id}", response=ConversationDetailOut)
def get_conversation(request: HttpRequest, conversation_id: int) -> object:
    return sel.conversation_detail(account=request.auth, conversation_id=conversation_id)


@router.get("/{conversation_id}/requests", response=list[RequestOut])
def list_requests(request: HttpRequest, conversation_id: int, limit: int = 100) -> object:
    return sel.requests_for_conversation(
        account=request.auth, conversation_id=conversation_id, limit=limit
    )


@router.get("/{conversation_id}/requests/{request_id}/context", response=RequestContextOut)
def get_request_context(request: HttpRequest, conversation_id: int, request_id: str) -> object:
    """What the request's context window held and why (planned requests only)."""
    return sel.request_context_get(
        account=request.auth, conversation_id=conversation_id, request_id=request_id
    )


@router.post("/{conversation_id}/search", response=list[QuoteOut])
def search_quotes(request: HttpRequest, conversation_id: int, body: SearchIn) -> object:
    """Quote search over the stored turns (BM25 + embeddings, fused)."""
    return sel.quotes_for_conversation(
        account=request.auth, conversation_id=conversation_id, text=body.query, limit=body.limit
    )


@router.get("/{conversation_id}/tags", response=list[TagOut])
def list_tags(request: HttpRequest, conversation_id: int) -> object:
    return sel.tags_for_conversation(account=request.auth, conversation_id=conversation_id)


@router.get("/{conversation_id}/segments", response=list[SegmentOut])
def list_segments(request: HttpRequest, conversation_id: int) -> object:
    return sel.segments_for_conversation(account=request.auth, conversation_id=conversation_id)


@router.get("/{conversation_id}/tag-summaries", response=list[TagSummaryOut])
def list_tag_summaries(request: HttpRequest, conversation_id: int) -> object:
    return sel.tag_summaries_for_conversation(account=request.auth, conversation_id=conversation_id)
