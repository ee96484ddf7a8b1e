"""Group the turns being compacted into topical segments.

Contract: ``segments_plan(turns, settings, embeddings)`` takes turns at
consecutive positions (the compaction range; any order, sorted here) and returns
segments that cover every one of them exactly once, in order.

- Tool chains are atomic: a turn that answers a tool call stays in the segment
  of the turn that made the call, with everything between them. No other rule
  overrides this one.
- A change of ``session_date`` or a gap longer than ``settings.gap_hours``
  between ``created_at`` stamps forces a boundary.
- ``settings.segment_max_tokens`` and ``settings.segment_max_turns`` force a
  boundary; the cut moves back to the start of the latest user exchange when
  what stays behind is at least half a segment (by tokens or by turns). A
  single chain larger than the caps becomes a segment of its own.
- Otherwise a boundary is a topic shift: low similarity between a user turn and
  the exchange before it, measured as Jaccard overlap of tags and, when
  ``embeddings`` (one row per turn, same order, unit length) are given, cosine
  similarity. Topic boundaries are placed only before user turns, so a question
  stays with its answer.
- Segment tags are the union of member tags, most frequent first (ties: first
  seen); ``session_date`` is the first known date; ``tokens`` the sum.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from memory_app.engine.compaction import unsafe_cuts
from memory_app.engine.types import CompactionSettings, Matrix, SegmentPlan, TurnView

# Below this similarity a user turn opens a new segment.
TOPIC_SHIFT = 0.2


@dataclass(slots=True)
class _Unit:
    """Turns that must stay together: one turn, or a whole tool chain."""

    turns: list[TurnView]
    rows: list[int]  # indexes into the embeddings matrix

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.turns)

    @property
    def opens_exchange(self) -> bool:
        return self.turns[0].role == "user"


@dataclass(slots=True)
class _Open:
    units: list[_Unit] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.units)

    @property
    def turn_count(self) -> int:
        return sum(len(u.turns) for u in self.units)

    def session_date(self) -> date | None:
        return next((t.session_date for u in self.units for t in u.turns if t.session_date), None)

    def exchange(self) -> list[_Unit]:
        """The units since the last user turn: what a new user turn is compared to."""
        for index in range(len(self.units) - 1, -1, -1):
            if self.units[index].opens_exchange:
                return self.units[index:]
        return self.units


def segments_plan(
    turns: list[TurnView],
    settings: CompactionSettings,
    embeddings: Matrix | None = None,
) -> list[SegmentPlan]:
    """Split ``turns`` into segments (see the module docstring for the rules)."""
    order = sorted(range(len(turns)), key=lambda i: turns[i].position)
    if embeddings is not None and len(embeddings) != len(turns):
        raise ValueError(f"{len(embeddings)} embedding rows for {len(turns)} turns")
    groups: list[list[_Unit]] = []
    current = _Open()
    for unit in _units([turns[i] for i in order], order):
        if current.units:
            closed, current = _boundary(current, unit, settings, embeddings)
            groups.extend(closed)
        current.units.append(unit)
    if current.units:
        groups.append(current.units)
    return [_plan(units) for units in groups]


def _boundary(
    current: _Open, unit: _Unit, settings: CompactionSettings, embeddings: Matrix | None
) -> tuple[list[list[_Unit]], _Open]:
    """The segments that close before ``unit``, and the open one it joins."""
    if _forced_break(current, unit, settings):
        return [current.units], _Open()
    if _over_caps(current, unit, settings):
        if unit.opens_exchange:
            return [current.units], _Open()
        kept, carried = _cap_split(current.units, settings)
        if carried and _over_caps(_Open(carried), unit, settings):
            return [kept, carried], _Open()
        return [kept], _Open(carried)
    if _topic_shift(current, unit, embeddings):
        return [current.units], _Open()
    return [], current


def _units(ordered: list[TurnView], rows: list[int]) -> list[_Unit]:
    unsafe = unsafe_cuts(ordered)
    units: list[_Unit] = []
    for index, turn in enumerate(ordered):
        if units and index in unsafe:
            units[-1].turns.append(turn)
            units[-1].rows.append(rows[index])
        else:
            units.append(_Unit([turn], [rows[index]]))
    return units


def _forced_break(current: _Open, unit: _Unit, settings: CompactionSettings) -> bool:
    last = current.units[-1].turns[-1]
    first = unit.turns[0]
    known = current.session_date()
    if known is not None and first.session_date is not None and first.session_date != known:
        return True
    if last.created_at is not None and first.created_at is not None:
        gap = (first.created_at - last.created_at).total_seconds() / 3600
        return gap > settings.gap_hours
    return False


def _over_caps(current: _Open, unit: _Unit, settings: CompactionSettings) -> bool:
    return (
        current.tokens + unit.tokens > settings.segment_max_tokens
        or current.turn_count + len(unit.turns) > settings.segment_max_turns
    )


def _cap_split(units: list[_Unit], settings: CompactionSettings) -> tuple[list[_Unit], list[_Unit]]:
    """Close a full segment, preferably before its latest user turn; the units
    after that cut carry over into the next segment."""
    for index in range(len(units) - 1, 0, -1):
        if not units[index].opens_exchange:
            continue
        kept = _Open(units[:index])
        if (
            kept.tokens >= settings.segment_max_tokens / 2
            or kept.turn_count >= settings.segment_max_turns / 2
        ):
            return units[:index], units[index:]
        break
    return units, []


def _topic_shift(current: _Open, unit: _Unit, embeddings: Matrix | None) -> bool:
    if not unit.opens_exchange:
        return False
    scores: list[float] = []
    before = current.exchange()
    tags_before = {tag for u in before for t in u.turns for tag in t.tags}
    tags_now = {tag for t in unit.turns for tag in t.tags}
    if tags_before and tags_now:
        scores.append(len(tags_before & tags_now) / len(tags_before | tags_now))
    if embeddings is not None:
        similarity = _cosine(embeddings, [r for u in before for r in u.rows], unit.rows)
        if similarity is not None:
            scores.append(similarity)
    return bool(scores) and sum(scores) / len(scores) < TOPIC_SHIFT


def _cosine(embeddings: Matrix, left: list[int], right: list[int]) -> float | None:
    """Cosine of the mean rows; ``None`` when a side has no direction (empty text)."""
    a = embeddings[left].mean(axis=0)
    b = embeddings[right].mean(axis=0)
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm > 0 else None


def _plan(units: list[_Unit]) -> SegmentPlan:
    members = [t for u in units for t in u.turns]
    counts: Counter[str] = Counter(tag for t in members for tag in dict.fromkeys(t.tags))
    # Counter keeps first-seen order and sorted() is stable: ties stay chronological.
    tags = sorted(counts, key=lambda tag: -counts[tag])
    return SegmentPlan(
        start_position=members[0].position,
        end_position=members[-1].position,
        positions=[t.position for t in members],
        tags=tags,
        tokens=sum(t.tokens for t in members),
        session_date=next((t.session_date for t in members if t.session_date), None),
    )
