"""The payload planner: what one request sends upstream, within the ceiling.

Contract (``plan_payload(inputs) -> PayloadPlan``; ARCHITECTURE.md, "The payload
keeps the provider's prompt cache warm"):

- Pass-through: with nothing compacted (``watermark == 0``) and
  ``fixed_tokens`` plus every turn under the ceiling, the plan says
  ``passthrough=True`` and the caller forwards the request unchanged.
- Layout: the client's system prompt and tools (``fixed_tokens``, not ours),
  then ``stable_block``, then the kept history, then ``recall_block``, which the
  caller attaches to the latest user turn. Everything together stays within
  ``ceiling``; ``tokens_by_part`` says how it was spent.
- ``stable_block`` is a pure function of ``topic_hint``, ``stable_summaries``,
  ``ceiling``, ``fixed_tokens``, ``count``, ``tag_rules`` and ``watermark``
  (for the rules' time to live): topics sorted by turn count then
  name, summaries in conversation order, nothing from this message. Two
  requests between compactions get it byte for byte. It takes at most
  ``stable_share`` of the room left by ``fixed_tokens``: topics fill up to
  half of it, then tag summaries, then the topics that did not fit yet; what
  does not fit is left out (greedily) and listed in ``stable_left_out``;
  one line of ``reasons`` counts what went in and what was left out.
- The kept history is one contiguous verbatim window from the watermark to the
  last turn. It opens with a user message (not a tool result): a watermark
  inside a tool chain (a call and the turns answering it) or before an
  assistant turn moves back to the user message that opened the exchange.
  Only when the window alone does not fit (compaction lagging behind: the
  hard-threshold case) are its oldest turns
  dropped, at chain-safe cuts, with ``window_truncated=True``; the cache prefix
  is then lost, unavoidably. Should that reach into the last
  ``protected_turns``, the stable block is given up first. If even the last
  chain does not fit, it is sent anyway and ``reasons`` says the ceiling is
  exceeded: the new message always goes upstream.
- Tag rules (``tag_rules``: pattern, priority, ttl; ``engine.tagrules``): hits
  and stable-block items on higher-priority tags come first, and units whose
  tag's time to live is over are left out (for the stable block, counted at
  the watermark, so the block still changes only at compaction).
- Recall fills the rest greedily by score: a turn hit is rendered verbatim when
  it fits, else as the summary of the segment covering it; a segment hit is its
  summary (pass ``retrieval.expand_to_turns`` output to prefer verbatim turns);
  a tag-summary hit is skipped when the stable block has it. Units in the kept
  window are skipped. A verbatim turn is kept even when a summary of its segment
  is already in (the summary is lossy; the turn is the evidence), but a segment
  whose every turn is already present verbatim is skipped. Items that do not
  fit are skipped and the scan goes on, so smaller ones may still fit. The block
  lists items in conversation order, each labelled with its session date.
- The recall block is paid at the full input price on every request (it sits
  after the cached prefix), so in the cache-aware layout it takes at most
  ``recall_share`` of the room left by ``fixed_tokens`` — unless the message
  is about older memory: the best usable hit (outside the window) scores
  ``recall_confident`` or more, or it scores ``recall_reach`` or more and at
  least ``REACH_RATIO`` (1.5) × the best hit inside the kept window (the message
  reaches back rather than going on with what the window holds). Then the
  recall gets all the room the window and the stable block leave. A threshold
  of 0 disables its test. ``reasons`` says which applied.
- ``cache_aware=False`` (the "rewrite" layout of the cache benchmark): the recall
  goes inside the one memory block in the system position; ``recall_block`` is
  empty. It ignores caching, so its recall always gets all the room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from memory_app.engine.compaction import unsafe_cuts
from memory_app.engine.tagrules import TagRules
from memory_app.engine.types import MemoryUnit, PayloadPlan, PlanInputs, Scored, TurnView

STABLE_RULES = (
    "Earlier parts of this conversation were compacted. The topics and summaries "
    "below stand for them; recalled excerpts, when present, come with their dates."
)
REACH_RATIO = 1.5  # a hit outside the window this many times the window's best: reaching back
RECALL_INTRO = "Recalled from earlier in this conversation for the latest message (oldest first):"
UNDATED = "date unknown"


@dataclass(frozen=True, slots=True)
class _Item:
    """One recalled unit as rendered in the block."""

    key: str
    order: tuple[int, int, str]  # conversation order: start, kind rank, key
    line: str
    score: float
    why: str
    span: frozenset[int]  # the turns it stands for
    verbatim: bool
    hit: str = ""  # the retrieval hit that brought it (a turn's key for its segment summary)


_PLACEHOLDER = _Item("", (0, 0, ""), "", 0.0, "", frozenset(), False)


def plan_payload(inputs: PlanInputs) -> PayloadPlan:
    """Plan one request's upstream payload; see the module contract."""
    history = sum(turn.tokens for turn in inputs.turns)
    if inputs.watermark <= 0 and inputs.fixed_tokens + history <= inputs.ceiling:
        return _passthrough(inputs, history)
    plan = PayloadPlan(passthrough=False)
    stable_units, stable_lines = _stable_parts(inputs, plan)
    stable = _render_context(stable_lines, []) if stable_lines else ""
    cut, stable = _window(inputs, stable, plan)
    if not stable:
        stable_units, stable_lines = [], []
    kept = inputs.turns[cut:]
    plan.kept_positions = [turn.position for turn in kept]
    plan.dropped_positions = [turn.position for turn in inputs.turns[:cut]]
    plan.window_start = plan.kept_positions[0] if kept else inputs.watermark
    window_tokens = sum(turn.tokens for turn in kept)
    room = inputs.ceiling - inputs.fixed_tokens - window_tokens
    groups = _candidates(inputs, set(plan.kept_positions), {u.key for u in stable_units})
    if inputs.cache_aware:
        room -= _count(inputs, stable)
        budget = _recall_budget(inputs, groups, room, set(plan.kept_positions), plan.reasons)
        chosen = _fit(groups, _render_recall, budget, inputs, kept)
        recall = _render_recall(chosen)
    else:
        # The rewrite layout: one block, recall inside it, rebuilt every request.
        def single(items: list[_Item]) -> str:
            return _render_context(stable_lines, items)

        chosen = _fit(groups, single, room, inputs, kept)
        stable = single(chosen) if chosen else stable
        recall = ""
    plan.stable_block, plan.recall_block = stable, recall
    plan.recalled = [(item.key, inputs.count(item.line), item.why) for item in chosen]
    plan.recalled_hits = {item.key: item.hit for item in chosen}
    _account(inputs, plan, window_tokens, len(groups))
    return plan


def _passthrough(inputs: PlanInputs, history: int) -> PayloadPlan:
    positions = [turn.position for turn in inputs.turns]
    return PayloadPlan(
        passthrough=True,
        window_start=positions[0] if positions else 0,
        kept_positions=positions,
        tokens_by_part={
            "fixed": inputs.fixed_tokens,
            "stable": 0,
            "window": history,
            "recall": 0,
            "headroom": inputs.ceiling - inputs.fixed_tokens - history,
        },
        reasons=["nothing compacted and under the ceiling: forwarded unchanged"],
    )


def _count(inputs: PlanInputs, text: str) -> int:
    return inputs.count(text) if text else 0


def _account(inputs: PlanInputs, plan: PayloadPlan, window: int, hits: int) -> None:
    stable = _count(inputs, plan.stable_block)
    recall = _count(inputs, plan.recall_block)
    plan.tokens_by_part = {
        "fixed": inputs.fixed_tokens,
        "stable": stable,
        "window": window,
        "recall": recall,
        "headroom": inputs.ceiling - inputs.fixed_tokens - stable - window - recall,
    }
    plan.reasons.append(
        f"window: {len(plan.kept_positions)} turns from position {plan.window_start}, "
        f"{window} tokens"
    )
    where = "recall block" if inputs.cache_aware else "system block (cache-unaware layout)"
    plan.reasons.append(f"{where}: {len(plan.recalled)} items from {hits} usable hits")


# ---------------------------------------------------------------- stable block


def _stable_parts(inputs: PlanInputs, plan: PayloadPlan) -> tuple[list[MemoryUnit], list[str]]:
    """The tag summaries and the lines of the stable block, within its share;
    what does not fit goes to ``plan.stable_left_out``."""
    if not inputs.topic_hint and not inputs.stable_summaries:
        return [], []
    cap = int(inputs.stable_share * max(0, inputs.ceiling - inputs.fixed_tokens))
    topic_lines: list[str] = []
    units: list[MemoryUnit] = []
    # One entry per item rather than one reason each: a long conversation has
    # hundreds of topics, and reasons are stored with every request.
    topics_out: list[str] = []
    summaries_out: list[str] = []

    def over(limit: int) -> bool:
        lines = _stable_lines(topic_lines, units)
        return inputs.count(_render_context(lines, [])) > limit

    rules = TagRules(inputs.tag_rules, inputs.units.values())
    # Aged against the watermark, not the latest turn: the block changes only at compaction.
    topics = sorted(
        (h for h in inputs.topic_hint if not rules.aged([h[0]], inputs.watermark)),
        key=lambda h: (-rules.priority([h[0]]), -h[1], h[0]),
    )
    summaries = sorted(
        (u for u in inputs.stable_summaries if not rules.aged(u.tags, inputs.watermark)),
        key=lambda u: (-rules.priority(u.tags), u.start_position, u.key),
    )
    # Topics take up to half the share, so that tag summaries (content, not
    # just names) get room too; topics that did not fit then take what is left.
    waiting: list[tuple[str, int, str]] = []
    for topic in topics:
        topic_lines.append(_topic_line(topic))
        if over(cap // 2):
            topic_lines.pop()
            waiting.append(topic)
    for unit in summaries:
        units.append(unit)
        if over(cap):
            units.pop()
            summaries_out.append(unit.key)
    for topic in waiting:
        topic_lines.append(_topic_line(topic))
        if over(cap):
            topic_lines.pop()
            topics_out.append(topic[0])
    plan.stable_left_out = [*topics_out, *summaries_out]
    plan.reasons.append(
        _stable_reason(len(topic_lines), len(units), len(topics_out), len(summaries_out))
    )
    return units, _stable_lines(topic_lines, units)


def _topic_line(topic: tuple[str, int, str]) -> str:
    tag, turns, description = topic
    return f"{tag} ({turns} turns)" + (f": {description}" if description else "")


def _stable_reason(topics: int, summaries: int, topics_out: int, summaries_out: int) -> str:
    """The one reason line for the stable block: what went in, what was left out."""
    reason = f"stable block: {topics} topics, {summaries} tag summaries"
    counts = ((topics_out, "topics"), (summaries_out, "tag summaries"))
    out = [f"{n} {what}" for n, what in counts if n]
    if out:
        reason += f"; {' and '.join(out)} left out: over its share"
    return reason


def _stable_lines(topic_lines: Sequence[str], units: Sequence[MemoryUnit]) -> list[str]:
    lines = [STABLE_RULES]
    if topic_lines:
        lines += ["<context-topics>", *topic_lines, "</context-topics>"]
    for unit in units:
        name = unit.key.removeprefix("g:")
        span = f'turns="{unit.start_position}-{unit.end_position}"'
        lines += [f'<tag-summary tag="{name}" {span}>', _flat(unit.text), "</tag-summary>"]
    return lines


def _render_context(stable_lines: Sequence[str], items: Sequence[_Item]) -> str:
    """The ``<virtual-context>`` block: stable lines, then (rewrite layout) the recall."""
    body = list(stable_lines) or [STABLE_RULES]
    if items:
        body.append(_render_recall(items))
    return "<virtual-context>\n" + "\n".join(body) + "\n</virtual-context>"


def _flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- window


def _window(inputs: PlanInputs, stable: str, plan: PayloadPlan) -> tuple[int, str]:
    """The index the kept window starts at, and the stable block that still fits."""
    turns = inputs.turns
    # A kept history opens with the user's own message: providers reject one
    # that opens with the assistant or a tool result (Gemini: a function call
    # must follow a user turn), so no cut falls before any other turn.
    unsafe = unsafe_cuts(turns) | {
        i for i, turn in enumerate(turns) if turn.role != "user" or turn.tool_results
    }
    start = next((i for i, t in enumerate(turns) if t.position >= inputs.watermark), len(turns))
    while start > 0 and start in unsafe:
        start -= 1
    if start < len(turns) and turns[start].position < inputs.watermark:
        plan.reasons.append(
            f"window starts at {turns[start].position}, before the watermark "
            f"{inputs.watermark}: the window opens with the user message of its exchange"
        )
    suffix = [*accumulate(t.tokens for t in reversed(turns))][::-1] + [0]
    protected = len(turns) - max(0, inputs.protected_turns)
    while protected > 0 and protected in unsafe:
        protected -= 1
    room = inputs.ceiling - inputs.fixed_tokens
    start = _window_start(inputs, start, min(protected, len(turns) - 1), suffix, unsafe, plan)
    cut = _fitting_cut(start, suffix, unsafe, room - _count(inputs, stable))
    if stable and (cut is None or cut > max(start, protected)):
        bare = _fitting_cut(start, suffix, unsafe, room)
        if bare is not None and (cut is None or bare < cut):
            plan.reasons.append("stable block given up: the protected turns need the room")
            stable, cut = "", bare
    if cut is None:
        safe = [k for k in range(start, len(turns)) if k not in unsafe]
        cut = safe[-1] if safe else start
        plan.reasons.append("the last tool chain alone is over the ceiling: sent anyway")
    if cut > start:
        plan.window_truncated = True
        plan.reasons.append(
            f"window over budget (compaction lagging): dropped {cut - start} oldest turns; "
            "the cached prefix is lost for this request"
        )
    return cut, stable


def _window_start(
    inputs: PlanInputs,
    start: int,
    protected: int,
    suffix: list[int],
    unsafe: set[int],
    plan: PayloadPlan,
) -> int:
    """Where the kept window starts once it is held to ``window_share`` of the room.

    The start moves forward only to grid points: the first turn after each
    further half-share of tokens past ``start``. Grid points depend on the
    turns from ``start`` on, which later requests only extend, so consecutive
    requests keep the same start (and the provider's cached prefix) until the
    window grows by half a share, then jump by at least that much. The last
    ``protected_turns`` are always kept; the turns passed over stay stored and
    can be recalled like any older turn."""
    room = inputs.ceiling - inputs.fixed_tokens
    cap = int(inputs.window_share * room)
    if inputs.window_share >= 1.0 or suffix[start] <= cap or start >= protected:
        return start
    step = max(1, cap // 2)
    chosen, mark = start, step
    for i in range(start + 1, protected + 1):
        taken = suffix[start] - suffix[i]  # tokens of turns[start:i]
        if taken < mark:
            continue
        mark = (taken // step + 1) * step
        if i in unsafe:
            continue
        chosen = i
        if suffix[i] <= cap:
            break
    if chosen != start:
        plan.reasons.append(
            f"window held to {inputs.window_share:.0%} of the room: starts at "
            f"{inputs.turns[chosen].position}, the {chosen - start} turns before stay recallable"
        )
    return chosen


def _fitting_cut(start: int, suffix: list[int], unsafe: set[int], room: int) -> int | None:
    """The earliest chain-safe cut from ``start`` whose suffix fits ``room``."""
    for cut in range(start, len(suffix) - 1):  # cutting at the very end would drop everything
        if cut not in unsafe and suffix[cut] <= room:
            return cut
    return None


# ---------------------------------------------------------------- recall


def _candidates(inputs: PlanInputs, kept: set[int], stable_keys: set[str]) -> list[list[_Item]]:
    """Per usable hit, in tag-rule priority then score order, its renderings in
    order of preference.

    A turn hit: verbatim, then the summary of the narrowest segment covering it."""
    roles = {turn.position: turn.role for turn in inputs.turns}
    segments = sorted(
        (u for u in inputs.units.values() if u.kind == "segment"),
        key=lambda u: (u.end_position - u.start_position, u.start_position),
    )
    rules = TagRules(inputs.tag_rules, inputs.units.values())
    now = inputs.turns[-1].position if inputs.turns else 0
    groups: list[list[_Item]] = []
    priorities: list[int] = []
    for hit in inputs.scored:
        unit = inputs.units.get(hit.key)
        if unit is None or hit.key in stable_keys:
            continue
        if set(range(unit.start_position, unit.end_position + 1)) <= kept:
            continue  # already in the window
        if rules and rules.aged(unit.tags, now):
            continue  # a tag rule's time to live is over
        why = ", ".join(hit.why) or f"score {hit.score:.4f}"
        options = [_item(unit, hit, why, roles)]
        if unit.kind == "turn":
            position = unit.start_position
            cover = next(
                (s for s in segments if s.start_position <= position <= s.end_position), None
            )
            if cover is not None:
                options.append(_item(cover, hit, f"summary for {unit.key}; {why}", roles))
        groups.append(options)
        priorities.append(rules.priority(unit.tags) if rules else 0)
    # The priority pass: hits on higher-priority tags first, score order within.
    order = sorted(range(len(groups)), key=lambda i: -priorities[i])
    return [groups[i] for i in order]


def _item(unit: MemoryUnit, hit: Scored, why: str, roles: dict[int, str]) -> _Item:
    stamp = unit.session_date.isoformat() if unit.session_date else UNDATED
    if unit.kind == "turn":
        label = roles.get(unit.start_position, "turn")
    elif unit.kind == "segment":
        label = f"summary of turns {unit.start_position}-{unit.end_position}"
    else:
        label = f"summary of topic {unit.key.removeprefix('g:')}"
    rank = {"segment": 0, "turn": 1}.get(unit.kind, 2)
    return _Item(
        key=unit.key,
        order=(unit.start_position, rank, unit.key),
        line=f"[{stamp}] {label}: {_flat(unit.text)}",
        score=hit.score,
        why=why,
        span=frozenset(range(unit.start_position, unit.end_position + 1)),
        verbatim=unit.kind == "turn",
        hit=hit.key,
    )


def _recall_budget(
    inputs: PlanInputs, groups: list[list[_Item]], room: int, kept: set[int], reasons: list[str]
) -> int:
    """Tokens the volatile recall block may take (see the module contract)."""
    share = int(inputs.recall_share * max(0, inputs.ceiling - inputs.fixed_tokens))
    if share >= room:
        return room
    best = max((options[0].score for options in groups), default=0.0)
    inside = _best_inside(inputs, kept)
    confident = 0.0 < inputs.recall_confident <= best
    reaches = 0.0 < inputs.recall_reach <= best and best >= REACH_RATIO * inside
    if confident or reaches:
        why = "strong" if confident else f"over {REACH_RATIO:g} × the window's best ({inside:.4f})"
        reasons.append(
            f"recall: the best hit outside the window scores {best:.4f}, {why}: the message "
            f"is about older memory, all {room} tokens of room"
        )
        return room
    reasons.append(
        f"recall held to {inputs.recall_share:.0%} of the room ({share} tokens): it is paid "
        f"in full on every request; best hit outside the window {best:.4f}, inside {inside:.4f}"
    )
    return max(0, share)


def _best_inside(inputs: PlanInputs, kept: set[int]) -> float:
    """The best score of a hit on a turn of the kept window (``scored`` is best
    first), the new message itself left out should it be stored already."""
    latest = inputs.turns[-1].position if inputs.turns else -1
    for hit in inputs.scored:
        unit = inputs.units.get(hit.key)
        if unit is None or unit.kind != "turn" or unit.start_position == latest:
            continue
        if unit.start_position in kept:
            return hit.score
    return 0.0


def _fit(
    groups: list[list[_Item]],
    render: Callable[[list[_Item]], str],
    room: int,
    inputs: PlanInputs,
    kept: Sequence[TurnView],
) -> list[_Item]:
    """Greedy fill in score order: per hit, the first option that still fits.

    Line costs add up as an estimate; the rendered block is then counted whole
    and the lowest-scored items go until it fits (token counts are not additive)."""
    used = inputs.count(render([_PLACEHOLDER]))
    present = {turn.position for turn in kept}
    chosen: list[_Item] = []
    keys: set[str] = set()
    for options in groups:
        for item in options:
            if item.key in keys or (not item.verbatim and item.span <= present):
                break  # this hit is already represented
            cost = inputs.count(item.line) + 1
            if used + cost <= room:
                used += cost
                chosen.append(item)
                keys.add(item.key)
                if item.verbatim:
                    present |= item.span
                break
    while chosen and inputs.count(render(chosen)) > room:
        chosen.remove(min(chosen, key=lambda item: item.score))
    return chosen


def _render_recall(items: Sequence[_Item]) -> str:
    if not items:
        return ""
    lines = [item.line for item in sorted(items, key=lambda item: item.order)]
    return "<recalled-context>\n" + "\n".join([RECALL_INTRO, *lines]) + "\n</recalled-context>"
