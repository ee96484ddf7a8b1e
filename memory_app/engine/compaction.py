"""When to compact, and which turns.

Contract:

- The verbatim window is every turn at a position ≥ the watermark. Its fill is
  ``(fixed_tokens + window tokens) / ceiling``, where ``fixed_tokens`` is what the
  payload carries besides the window (system prompt, tools, memory block).
- Pressure is ``hard`` at or above ``settings.hard``, ``soft`` at or above
  ``settings.soft``, else ``none``; only soft and hard pressure compact anything.
- Compaction is the one event that breaks the provider's prompt cache, so it
  happens in one large step: the range starts at the watermark and runs far
  enough that the window falls to about ``settings.target`` of the ceiling.
- The last ``settings.protected_turns`` turns of the window are never compacted.
- A range never ends between a tool call and its result: it is extended to take
  the answering turn, or, when that would reach a protected turn, cut before the
  call. The range may come out empty.
- Idempotent: with the watermark a plan returns (its ``end_position``) and the
  same turns, planning again gives pressure ``none`` or an empty range.
"""

from __future__ import annotations

import math

from memory_app.engine.types import CompactionPlan, CompactionSettings, TurnView

NONE = "none"
SOFT = "soft"
HARD = "hard"


def fill_level(turns: list[TurnView], watermark: int, ceiling: int, fixed_tokens: int = 0) -> float:
    """Share of ``ceiling`` taken by ``fixed_tokens`` plus the window from ``watermark``."""
    if ceiling <= 0:
        raise ValueError("ceiling must be positive")
    window = sum(turn.tokens for turn in turns if turn.position >= watermark)
    return (fixed_tokens + window) / ceiling


def pressure_for(fill: float, settings: CompactionSettings) -> str:
    if fill >= settings.hard:
        return HARD
    if fill >= settings.soft:
        return SOFT
    return NONE


def compaction_plan(
    turns: list[TurnView],
    watermark: int,
    settings: CompactionSettings,
    fixed_tokens: int = 0,
) -> CompactionPlan:
    """Decide the pressure and, under pressure, the turns to compact now."""
    fill = fill_level(turns, watermark, settings.ceiling, fixed_tokens)
    pressure = pressure_for(fill, settings)
    plan = CompactionPlan(
        pressure=pressure, fill=fill, start_position=watermark, end_position=watermark
    )
    if pressure == NONE:
        return plan
    window = sorted((t for t in turns if t.position >= watermark), key=lambda t: t.position)
    limit = max(0, len(window) - max(0, settings.protected_turns))
    # Tokens to shed so the window drops to the target fill, not just under soft.
    target_tokens = math.floor(settings.target * settings.ceiling)
    excess = fixed_tokens + sum(t.tokens for t in window) - target_tokens
    if excess <= 0 or limit == 0:
        return plan
    wanted = _turns_to_shed(window[:limit], excess)
    cut = _chain_safe_cut(window, wanted, limit)
    if cut == 0:
        return plan
    compacted = window[:cut]
    plan.positions = [t.position for t in compacted]
    plan.end_position = compacted[-1].position + 1
    return plan


def _turns_to_shed(candidates: list[TurnView], excess: int) -> int:
    """How many leading candidates to compact to shed ``excess`` tokens (all if never)."""
    shed = 0
    for count, turn in enumerate(candidates, start=1):
        shed += turn.tokens
        if shed >= excess:
            return count
    return len(candidates)


def unsafe_cuts(turns: list[TurnView]) -> set[int]:
    """Cut indexes ``k`` (between ``turns[k-1]`` and ``turns[k]``) that split a tool chain.

    A chain runs from the turn making a call to the last turn answering it; every
    cut inside that span would separate the two. Ids may repeat (Gemini names a
    call without id by its ordinal in its own content: ``search#0`` in every turn
    calling ``search`` once), so a result answers the latest call of its id before it."""
    made_at: dict[str, int] = {}
    unsafe: set[int] = set()
    for index, turn in enumerate(turns):
        for call_id in turn.tool_results:
            start = made_at.get(call_id)
            if start is not None:
                unsafe.update(range(start + 1, index + 1))
        for call_id in turn.tool_calls:
            made_at[call_id] = index
    return unsafe


def _chain_safe_cut(window: list[TurnView], wanted: int, limit: int) -> int:
    """The nearest cut at or after ``wanted`` (up to ``limit``) that keeps tool
    chains whole; failing that, the nearest one before it."""
    unsafe = unsafe_cuts(window)
    for cut in range(wanted, limit + 1):
        if cut not in unsafe:
            return cut
    for cut in range(wanted - 1, 0, -1):
        if cut not in unsafe:
            return cut
    return 0
