"""Plain data the memory engine decides on, and the protocols it is given.

The engine never imports Django, HTTP, Celery or Channels: services turn rows
into these dataclasses, call the engine, and write its decisions back. LLMs and
embedders arrive as the protocols at the bottom, so engine tests need neither a
database nor a network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


@dataclass(slots=True)
class TurnView:
    """One stored turn as the engine sees it."""

    position: int
    role: str  # user | assistant | tool | system
    text: str
    tokens: int = 0
    session_date: date | None = None
    created_at: datetime | None = None
    tags: list[str] = field(default_factory=list)
    # Tool call ids this turn makes, and the ids of the calls it answers: a turn
    # that answers a call is bound to the turn that made it (never split).
    tool_calls: list[str] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TagVocabulary:
    """A conversation's tags: canonical names, aliases, and how often each is used."""

    counts: dict[str, int] = field(default_factory=dict)  # canonical name → turns tagged
    aliases: dict[str, str] = field(default_factory=dict)  # alias → canonical name
    descriptions: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted(self.counts)


@dataclass(slots=True)
class TurnTagging:
    """What a tagger decided for one turn."""

    position: int
    tags: list[str]  # primary tags, canonical, most relevant first
    related: list[str] = field(default_factory=list)
    new_tags: list[str] = field(default_factory=list)  # tags not yet in the vocabulary
    fact_signals: list[str] = field(default_factory=list)  # sentences that state facts


@dataclass(slots=True)
class SegmentPlan:
    """A group of consecutive turns the segmenter decided belong together."""

    start_position: int
    end_position: int  # inclusive
    positions: list[int]
    tags: list[str]
    tokens: int
    session_date: date | None = None


@dataclass(slots=True)
class Summary:
    text: str
    tokens: int
    tags: list[str] = field(default_factory=list)  # the plan's tags plus any the summariser added


@dataclass(slots=True)
class CompactionSettings:
    ceiling: int = 16_000  # tokens
    soft: float = 0.70  # compact in the background above this fill level
    hard: float = 0.85  # the next request waits for compaction above this
    protected_turns: int = 6  # the most recent turns are never compacted
    target: float = 0.50  # compaction brings the verbatim window back to this fill
    segment_max_tokens: int = 2_000
    segment_max_turns: int = 12
    summary_ratio: float = 0.25  # summary size target as a share of the segment
    summary_max_tokens: int = 300
    gap_hours: float = 6.0  # a longer gap between turns forces a segment boundary


@dataclass(slots=True)
class CompactionPlan:
    """Which turns to compact now, and where the watermark ends up."""

    pressure: str  # none | soft | hard
    fill: float  # tokens of the verbatim window / ceiling
    start_position: int  # first position to compact (the current watermark)
    end_position: int  # exclusive: the new watermark
    positions: list[int] = field(default_factory=list)


# ---------------------------------------------------------------- protocols


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors (one row per text)."""

    model_name: str
    dimensions: int

    def encode(self, texts: Sequence[str]) -> Matrix: ...


class LLM(Protocol):
    """One completion for an internal role; returns the model's text.

    ``role`` names the component for the ledger (tagger, compactor, …)."""

    def complete(self, *, role: str, system: str, prompt: str, max_tokens: int) -> str: ...


JSON = dict[str, Any]


# ---------------------------------------------------------------- retrieval


@dataclass(slots=True)
class MemoryUnit:
    """One retrievable piece of a conversation's memory: a turn, a segment or a tag summary."""

    kind: str  # turn | segment | tag_summary
    key: str  # "t:12", "s:3", "g:travel": unique within the conversation
    text: str
    tags: list[str] = field(default_factory=list)
    start_position: int = 0  # the turn range covered, inclusive; a turn has start == end
    end_position: int = 0
    session_date: date | None = None
    tokens: int = 0
    embedding: int | None = None  # row of the embedding matrix given to the index


@dataclass(slots=True)
class Query:
    """What one new message asks of the memory."""

    text: str
    tags: list[tuple[str, float]] = field(default_factory=list)  # (tag, weight): inbound tagger
    related: list[str] = field(default_factory=list)  # neighbouring tags, counted at a lower weight
    embedding: Vector | None = None
    date_range: tuple[date, date] | None = None  # inclusive, from engine.temporal
    order_hint: str | None = None  # first | last | None


@dataclass(slots=True)
class Scored:
    """One retrieved unit: its fused score, and how each signal saw it."""

    key: str
    score: float
    signals: dict[str, float] = field(
        default_factory=dict
    )  # signal → raw score (tags, bm25, cosine)
    ranks: dict[str, int] = field(default_factory=dict)  # signal → 1-based rank among its matches
    why: list[str] = field(
        default_factory=list
    )  # short, human-readable: "bm25 #2", "in date range"


@dataclass(slots=True)
class RetrievalSettings:
    """Knobs of retrieval fusion; the defaults are the product's."""

    rrf_k: int = 60
    weights: dict[str, float] = field(
        default_factory=lambda: {"tags": 1.0, "bm25": 1.0, "cosine": 1.0}
    )
    related_weight: float = 0.35  # a related tag counts this much of a query tag of weight 1
    min_tag_score: float = 0.1  # below this a unit's tag overlap is no match at all
    hub_share: float = 0.25  # a tag on more than this share of the units is a hub …
    hub_min_units: int = 5  # … once it is on at least this many units
    min_cosine: float = 0.15  # a weaker cosine is no match at all
    embedding_only_factor: float = 0.5  # cosine alone is noisy
    date_boost: float = 0.5  # in the query's date range: score × (1 + boost)
    date_penalty: float = 0.2  # dated before the range: score × (1 - penalty)
    date_only_weight: float = 0.5  # in range with no other signal: this weight at rank 1
    order_window: int = 10  # order hints reorder among this many top candidates
    order_boost: float = 0.3  # the earliest (or latest) of them: × (1 + boost), the next half that

    def top_score(self) -> float:
        """The fused score of a unit that every signal ranks first (before date
        and order boosts): the scale that score thresholds are given against."""
        return sum(self.weights.get(name, 1.0) for name in ("tags", "bm25", "cosine")) / (
            self.rrf_k + 1
        )


# ---------------------------------------------------------------- assembly

from collections.abc import Callable  # noqa: E402  (this section was appended)


@dataclass(slots=True)
class PlanInputs:
    """Everything the payload planner needs for one request (see engine.assembly)."""

    ceiling: int  # tokens the whole upstream payload may take
    fixed_tokens: int  # the client's system prompt and tools, counted by the caller
    turns: list[TurnView]  # the active history as sent, in order; the last is the new message
    watermark: int  # turns at positions before it are compacted
    count: Callable[[str], int]  # tokens of a text, with the payload's tokenizer
    protected_turns: int = 6
    scored: list[Scored] = field(default_factory=list)  # retrieval for the new message, best first
    units: dict[str, MemoryUnit] = field(default_factory=dict)  # by key: "t:N", "s:N", "g:name"
    topic_hint: list[tuple[str, int, str]] = field(default_factory=list)  # tag, turns, description
    stable_summaries: list[MemoryUnit] = field(default_factory=list)  # tag summaries, stable block
    cache_aware: bool = True
    window_share: float = 1.0  # the verbatim window beyond the protected turns: ≤ this × room
    stable_share: float = 0.30  # the stable block: ≤ this × the room left by fixed_tokens
    recall_share: float = 1.0  # the volatile recall block (cache-aware): ≤ this × the room …
    recall_confident: float = 0.0  # … unless the best usable hit scores this much (0 = never)
    recall_reach: float = 0.0  # … or scores this much and 1.5 × the window's best (0 = never)
    tag_rules: list[tuple[str, int, int]] = field(default_factory=list)  # pattern, priority, ttl


@dataclass(slots=True)
class PayloadPlan:
    """What goes upstream for one request, and why (the dashboard shows ``reasons``)."""

    passthrough: bool
    stable_block: str = ""  # after the client's system prompt: the cacheable memory block
    recall_block: str = ""  # attached to the latest user turn: recalled for this message
    window_start: int = 0  # position of the first kept turn
    kept_positions: list[int] = field(default_factory=list)
    dropped_positions: list[int] = field(default_factory=list)
    recalled: list[tuple[str, int, str]] = field(default_factory=list)  # (key, tokens, why)
    recalled_hits: dict[str, str] = field(default_factory=dict)  # recalled key → hit's key
    tokens_by_part: dict[str, int] = field(
        default_factory=dict
    )  # fixed stable window recall headroom
    window_truncated: bool = False
    # topics and tag-summary keys ("g:name") the stable block had no room for,
    # in the order considered (one summary line in ``reasons`` counts them)
    stable_left_out: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)  # filled by the caller, for the record
