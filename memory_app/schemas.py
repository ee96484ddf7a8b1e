"""Shapes of the memory API (django-ninja)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

from ninja import Field, Schema


class ConversationOut(Schema):
    id: int
    session_id: str
    title: str
    format: str
    model: str
    created_at: datetime
    updated_at: datetime
    turn_count: int
    request_count: int
    client_tokens: int
    upstream_tokens: int
    watermark: int


class JobOut(Schema):
    id: int
    kind: str
    state: str
    progress: int
    total: int
    error: str
    created_at: datetime
    finished_at: datetime | None


class ConversationDetailOut(ConversationOut):
    turns: int
    segments: int
    tag_summaries: int
    facts: int
    tags: int
    pending_jobs: int
    jobs: list[JobOut]


class RequestOut(Schema):
    request_id: str
    format: str
    model: str
    stream: bool
    status: int
    client_tokens: int
    upstream_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: Decimal
    overhead_ms: float
    upstream_ms: float
    error: str
    created_at: datetime


class TagOut(Schema):
    name: str
    turn_count: int
    description: str
    aliases: list[str]


class SegmentOut(Schema):
    id: int
    start_position: int
    end_position: int
    level: int
    summary: str
    tokens: int
    summary_tokens: int
    session_date: date | None
    tags: list[str]


class TagSummaryOut(Schema):
    tag: str
    summary: str
    tokens: int
    covers_until: int


class RequestContextOut(Schema):
    request_id: str
    created_at: datetime
    ceiling: int
    planned: bool
    client_tokens: int
    upstream_tokens: int
    report: dict[str, Any]
    payload: str


class SearchIn(Schema):
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=50)


class QuoteOut(Schema):
    position: int
    role: str
    session_date: date | None
    score: float
    signals: dict[str, float]
    excerpt: str
