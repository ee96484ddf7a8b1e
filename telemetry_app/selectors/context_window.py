"""What a request's context window held, for the session page.

``request_context_view`` reads one request's context record
(``memory_app.models.RequestContext``; its ``report`` is written by
``memory_app.services.planning._report``) into what the viewer draws: the
ceiling as a stacked bar, the kept and dropped history ranges, the recalled and
left-out items with each signal's score and rank, the planner's reasons, and the
captured payload with anything that looks like a provider key redacted.
``working_set_latest`` reads the latest planned request's record to tell where
each segment and tag summary sits (stable block, recalled, or in memory only);
recalled keys are ``s:<segment pk>``, ``g:<tag name>`` and ``t:<position>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from memory_app.models import Conversation, RequestContext, Segment, TagSummary
from telemetry_app.models import RequestLog

PAYLOAD_SHOWN = 2_000_000  # characters of a captured payload shown
SIGNALS = ("tags", "bm25", "cosine")


# ------------------------------------------------------------ context viewer


@dataclass(frozen=True, slots=True)
class Span:
    """A range of turn positions, inclusive."""

    start: int
    end: int

    @property
    def label(self) -> str:
        return f"turn {self.start}" if self.start == self.end else f"turns {self.start}–{self.end}"

    @property
    def size(self) -> int:
        return self.end - self.start + 1


PART_LABELS = {
    "fixed": "System + tools",
    "stable": "<virtual-context> stable block",
    "window": "Kept history",
    "recall": "Recall",
    "headroom": "Headroom",
}


@dataclass(frozen=True, slots=True)
class BarPart:
    name: str
    label: str
    tokens: int
    pct: float  # share of the bar's width


@dataclass(slots=True)
class ContextView:
    """What one request's context window held, ready for the template."""

    request: RequestLog
    record: RequestContext | None
    bar: list[BarPart] = field(default_factory=list)
    ceiling: int = 0
    over_by: int = 0  # tokens above the ceiling (the last chain was sent anyway)
    client_tokens: int = 0
    upstream_tokens: int = 0
    kept: list[Span] = field(default_factory=list)
    dropped: list[Span] = field(default_factory=list)
    recalled: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    left_out_of_stable: list[str] = field(default_factory=list)  # topics, "g:…" summaries
    query: dict[str, Any] = field(default_factory=dict)
    payload: str = ""
    payload_chars: int = 0

    @property
    def planned(self) -> bool:
        return bool(self.record and self.record.planned)

    @property
    def upstream_pct(self) -> float | None:
        return self.upstream_tokens * 100 / self.client_tokens if self.client_tokens else None


def context_bar(parts: Mapping[str, int], ceiling: int) -> tuple[list[BarPart], int]:
    """The ceiling as a stacked bar (fixed, stable, window, recall, headroom) and
    how far the parts go over it; widths are shares of the larger of the two."""
    used = sum(max(0, int(n)) for k, n in parts.items() if k != "headroom")
    over = max(0, used - ceiling) if ceiling else 0
    headroom = max(0, ceiling - used) if ceiling else max(0, int(parts.get("headroom", 0)))
    sizes = {k: max(0, int(parts.get(k, 0))) for k in PART_LABELS if k != "headroom"}
    sizes["headroom"] = headroom
    whole = max(1, used + headroom)
    bar = [
        BarPart(name, PART_LABELS[name], tokens, round(tokens * 100 / whole, 2))
        for name, tokens in sizes.items()
        if tokens or name in parts
    ]
    return bar, over


def _spans(ranges: Any) -> list[Span]:
    spans = []
    for pair in ranges or []:
        if isinstance(pair, list | tuple) and len(pair) == 2:
            spans.append(Span(int(pair[0]), int(pair[1])))
    return spans


def _item_view(item: Mapping[str, Any]) -> dict[str, Any]:
    """A recalled or left-out item of the report, with its signals as rows."""
    signals = item.get("signals") or {}
    ranks = item.get("ranks") or {}
    positions = item.get("positions")
    return {
        **item,
        "span": Span(int(positions[0]), int(positions[1])) if positions else None,
        "signal_rows": [(name, signals.get(name), ranks.get(name)) for name in SIGNALS],
    }


_REDACTIONS = [
    (re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}"), "sk-ant-[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "sk-[redacted]"),
    (re.compile(r"AIza[0-9A-Za-z_\-]{20,}"), "AIza[redacted]"),
    (re.compile(r"\bvck_[A-Za-z0-9_\-]{8,}"), "vck_[redacted]"),
    (re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=\-]{8,}", re.I), r"\1[redacted]"),
    (
        re.compile(
            r"(\"(?:api[_-]?key|x-api-key|x-goog-api-key|authorization|access[_-]?token)\"\s*:\s*)"
            r"\"[^\"]*\"",
            re.I,
        ),
        r'\1"[redacted]"',
    ),
]


def payload_redact(text: str) -> str:
    """Anything in ``text`` that looks like a provider key, replaced. Keys travel
    in headers, never in the stored body; this is defense in depth."""
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


def payload_display(payload: str) -> str:
    """The captured upstream body, indented when it is JSON, keys redacted."""
    try:
        text = orjson.dumps(orjson.loads(payload), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        text = payload
    return payload_redact(text[:PAYLOAD_SHOWN])


# Records written before the report had "stable_left_out" said each left-out
# item in a reason line of its own; read only as a fallback for those.
_OVER_STABLE_SHARE = re.compile(r"^(?:topic )?(.+) left out of the stable block: over its share$")


def _reasons(report: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The planner's reasons, and apart (there may be dozens) the topics and tag
    summaries (``g:…``) it left out of the stable block for want of room."""
    reasons = [str(reason) for reason in report.get("reasons") or []]
    structured = report.get("stable_left_out")
    if structured is not None:
        return reasons, [str(name) for name in structured]
    kept: list[str] = []
    left_out: list[str] = []
    for reason in reasons:
        match = _OVER_STABLE_SHARE.match(reason)
        if match:
            left_out.append(match.group(1))
        else:
            kept.append(reason)
    return kept, left_out


def request_context_view(*, conversation: Conversation, request_id: str) -> ContextView | None:
    """The context window of one of the conversation's requests (``None``: no such
    request in this conversation)."""
    request = RequestLog.objects.filter(
        account_id=conversation.account_id, conversation=conversation, request_id=request_id
    ).first()
    if request is None:
        return None
    record = RequestContext.objects.filter(conversation=conversation, request_id=request_id).first()
    view = ContextView(request=request, record=record)
    if record is None:
        return view
    report = record.report or {}
    view.ceiling = int(report.get("ceiling") or record.ceiling)
    view.bar, view.over_by = context_bar(report.get("parts") or {}, view.ceiling)
    view.client_tokens = int(report.get("client_tokens") or record.client_tokens)
    view.upstream_tokens = int(record.upstream_tokens or report.get("upstream_tokens") or 0)
    view.kept, view.dropped = _spans(report.get("kept")), _spans(report.get("dropped"))
    view.recalled = [_item_view(i) for i in report.get("recalled") or []]
    view.left_out = [_item_view(i) for i in report.get("left_out") or []]
    view.reasons, view.left_out_of_stable = _reasons(report)
    view.query = report.get("query") or {}
    if record.payload:
        view.payload = payload_display(record.payload)
        view.payload_chars = len(record.payload)
    return view


# --------------------------------------------------------------- working set


@dataclass(frozen=True, slots=True)
class Depth:
    """Where a segment or tag summary sits in the latest planned request."""

    level: str  # stable | recalled | left-out | memory
    label: str
    note: str = ""


@dataclass(slots=True)
class WorkingSet:
    """The latest planned request's working set, from its context record."""

    request_id: str = ""
    created_at: datetime | None = None
    recalled: dict[str, Any] = field(default_factory=dict)  # key → score
    left_out: dict[str, Any] = field(default_factory=dict)
    stable: bool = False  # the request carried a stable block
    recalled_turns: list[int] = field(default_factory=list)  # positions recalled verbatim
    stable_left_out: set[str] = field(default_factory=set)  # topics, "g:…" summaries

    def segment_depth(self, segment: Segment) -> Depth:
        key = f"s:{segment.pk}"
        if key in self.recalled:
            return Depth("recalled", "recalled", "its summary was recalled")
        verbatim = [
            p for p in self.recalled_turns if segment.start_position <= p <= segment.end_position
        ]
        if verbatim:
            return Depth("recalled", "recalled", f"{len(verbatim)} of its turns, verbatim")
        return self._rest(key)

    def summary_depth(self, summary: TagSummary) -> Depth:
        key = f"g:{summary.tag.name}"
        if key in self.recalled:
            return Depth("recalled", "recalled")
        in_stable = self.stable and key not in self.stable_left_out
        if in_stable and self.created_at and summary.updated_at <= self.created_at:
            return Depth("stable", "stable block")
        if in_stable and self.created_at:
            return Depth("memory", "in memory only", "updated after the latest planned request")
        if key in self.stable_left_out:
            return Depth("memory", "in memory only", "left out of the stable block: over its share")
        return self._rest(key)

    def _rest(self, key: str) -> Depth:
        if key in self.left_out:
            score = self.left_out[key]
            note = f"a candidate (score {score:.4f}), left out" if score else "left out"
            return Depth("left-out", "in memory only", note)
        return Depth("memory", "in memory only")


def working_set_latest(*, conversation: Conversation) -> WorkingSet:
    record = (
        RequestContext.objects.filter(conversation=conversation, planned=True)
        .only("request_id", "created_at", "report")
        .order_by("-created_at", "-pk")
        .first()
    )
    if record is None:
        return WorkingSet()
    report = record.report or {}
    _, stable_left_out = _reasons(report)
    recalled = {i.get("key"): i.get("score") for i in report.get("recalled") or []}
    return WorkingSet(
        request_id=record.request_id,
        created_at=record.created_at,
        recalled=recalled,
        recalled_turns=[int(k[2:]) for k in recalled if k and k[:2] == "t:" and k[2:].isdigit()],
        left_out={i.get("key"): i.get("score") for i in report.get("left_out") or []},
        stable=int((report.get("parts") or {}).get("stable") or 0) > 0,
        stable_left_out=set(stable_left_out),
    )
