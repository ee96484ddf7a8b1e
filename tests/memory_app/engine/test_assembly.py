from __future__ import annotations

import random
from datetime import date

from memory_app.engine.assembly import plan_payload
from memory_app.engine.compaction import unsafe_cuts
from memory_app.engine.types import MemoryUnit, PayloadPlan, PlanInputs, Scored, TurnView


def count(text: str) -> int:
    """A deterministic stand-in tokenizer: one token per word."""
    return len(text.split())


def turn(
    position: int,
    tokens: int = 50,
    *,
    calls: list[str] | None = None,
    results: list[str] | None = None,
    day: date | None = None,
) -> TurnView:
    return TurnView(
        position=position,
        role="user" if position % 2 == 0 else "assistant",
        text=f"turn {position}",
        tokens=tokens,
        session_date=day,
        tool_calls=calls or [],
        tool_results=results or [],
    )


def history(n: int, tokens: int = 50) -> list[TurnView]:
    return [turn(i, tokens) for i in range(n)]


def turn_unit(position: int, words: int = 5, day: date | None = date(2023, 5, 20)) -> MemoryUnit:
    text = " ".join(["word"] * (words - 1) + [f"fact{position}"])
    return MemoryUnit("turn", f"t:{position}", text, [], position, position, day, words)


def segment_unit(key: str, start: int, end: int, text: str, day: date | None = None) -> MemoryUnit:
    return MemoryUnit("segment", key, text, [], start, end, day, count(text))


def tag_summary(name: str, text: str, start: int = 0, end: int = 10) -> MemoryUnit:
    return MemoryUnit("tag_summary", f"g:{name}", text, [name], start, end, None, count(text))


def hits(*keys: str) -> list[Scored]:
    return [Scored(key=key, score=1.0 / (rank + 1)) for rank, key in enumerate(keys)]


def inputs(turns: list[TurnView], **changes: object) -> PlanInputs:
    values: dict[str, object] = {
        "ceiling": 1_000,
        "fixed_tokens": 100,
        "turns": turns,
        "watermark": 0,
        "count": count,
        "protected_turns": 2,
    }
    values.update(changes)
    return PlanInputs(**values)  # type: ignore[arg-type]


def total(plan: PayloadPlan) -> int:
    parts = plan.tokens_by_part
    return parts["fixed"] + parts["stable"] + parts["window"] + parts["recall"]


def chain_intact(turns: list[TurnView], plan: PayloadPlan) -> bool:
    kept = set(plan.kept_positions)
    made = {c: t.position for t in turns for c in t.tool_calls}
    for t in turns:
        for call in t.tool_results:
            if call in made and (made[call] in kept) != (t.position in kept):
                return False
    return True


# ---------------------------------------------------------------- pass-through


def test_conversation_under_ceiling_with_nothing_compacted_passes_through() -> None:
    plan = plan_payload(inputs(history(10)))  # 100 + 500 ≤ 1000
    assert plan.passthrough
    assert plan.kept_positions == list(range(10))
    assert plan.stable_block == plan.recall_block == ""
    assert plan.tokens_by_part["headroom"] == 400


def test_conversation_over_ceiling_or_compacted_is_planned() -> None:
    assert not plan_payload(inputs(history(30))).passthrough
    assert not plan_payload(inputs(history(10), watermark=4)).passthrough


# ---------------------------------------------------------------- window


def test_window_starts_at_watermark_and_is_contiguous() -> None:
    turns = history(20, tokens=40)
    plan = plan_payload(inputs(turns, watermark=12))
    assert plan.window_start == 12
    assert plan.kept_positions == list(range(12, 20))
    assert plan.dropped_positions == list(range(12))
    assert not plan.window_truncated


def test_watermark_inside_a_tool_chain_moves_back_to_the_message_that_opened_it() -> None:
    turns = history(12, tokens=40)
    turns[5].tool_calls = ["a"]
    turns[6].tool_results = ["a"]
    turns[6].tool_calls = ["b"]
    turns[7].tool_results = ["b"]
    plan = plan_payload(inputs(turns, watermark=7))
    # 5 starts the chain, but an assistant turn cannot open the history: the
    # user message before it (4) does.
    assert plan.window_start == 4
    assert plan.kept_positions == list(range(4, 12))
    assert any("opens with the user message" in reason for reason in plan.reasons)


def test_the_kept_window_never_opens_with_an_assistant_turn_or_a_tool_result() -> None:
    rng = random.Random(5)
    for _ in range(200):
        turns = random_chained_history(rng, rng.randint(8, 30))
        plan = plan_payload(inputs(turns, watermark=rng.randint(1, len(turns) - 1)))
        first = turns[plan.kept_positions[0]]
        assert first.role == "user", plan.reasons
        assert not first.tool_results, plan.reasons


def random_chained_history(rng: random.Random, n: int) -> list[TurnView]:
    turns = [turn(i, rng.randint(5, 120)) for i in range(n)]
    for index in range(n - 1):
        if rng.random() < 0.3:
            call = f"call-{index}"
            turns[index].tool_calls.append(call)
            answer = min(n - 1, index + rng.randint(1, 4))
            turns[answer].tool_results.append(call)
    return turns


def test_tool_chains_are_never_split_for_random_layouts() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        turns = random_chained_history(rng, rng.randint(2, 40))
        plan = plan_payload(
            inputs(
                turns,
                ceiling=rng.randint(200, 3_000),
                watermark=rng.randint(0, len(turns) - 1),
            )
        )
        assert chain_intact(turns, plan), seed
        kept = plan.kept_positions
        assert kept == list(range(kept[0], kept[0] + len(kept))), seed  # contiguous
        assert kept[-1] == turns[-1].position, seed  # the new message always goes
        cut = len(turns) - len(kept)
        assert cut not in unsafe_cuts(turns), seed


def test_budget_is_never_exceeded_for_random_sizes() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        n = rng.randint(4, 40)
        turns = random_chained_history(rng, n)
        watermark = rng.randint(1, n - 1)
        units = {f"t:{i}": turn_unit(i, rng.randint(3, 80)) for i in range(watermark)}
        units["s:0"] = segment_unit("s:0", 0, watermark - 1, "word " * rng.randint(5, 60))
        scored = hits(*rng.sample(sorted(units), k=min(len(units), 10)))
        summaries = [tag_summary(f"tag{i}", "sum " * rng.randint(5, 100)) for i in range(3)]
        request = inputs(
            turns,
            ceiling=rng.randint(300, 3_000),
            fixed_tokens=rng.randint(0, 200),
            watermark=watermark,
            scored=scored,
            units=units,
            topic_hint=[(f"tag{i}", i + 1, "about things") for i in range(4)],
            stable_summaries=summaries,
            cache_aware=rng.random() < 0.7,
        )
        plan = plan_payload(request)
        unsafe = unsafe_cuts(turns)
        opens = [k for k in range(n) if k not in unsafe and turns[k].role == "user"]
        last_chain = max((k for k in opens if not turns[k].tool_results), default=0)
        if request.fixed_tokens + sum(t.tokens for t in turns[last_chain:]) <= request.ceiling:
            assert total(plan) <= request.ceiling, seed
            assert plan.tokens_by_part["headroom"] >= 0, seed
        assert plan.tokens_by_part["stable"] == (
            count(plan.stable_block) if plan.stable_block else 0
        )


def test_window_over_budget_drops_oldest_turns_chain_safe() -> None:
    turns = history(30, tokens=100)  # window from 5: 2,500 tokens against a 1,000 ceiling
    turns[24].tool_calls = ["x"]
    turns[26].tool_results = ["x"]
    plan = plan_payload(inputs(turns, watermark=5))
    assert plan.window_truncated
    assert total(plan) <= 1_000
    assert plan.kept_positions[-1] == 29
    assert chain_intact(turns, plan)
    assert plan.kept_positions[0] > 5
    assert any("compaction lagging" in reason for reason in plan.reasons)


# ---------------------------------------------------------------- stable block


def compacted_request(message: str, scored: list[Scored], **changes: object) -> PlanInputs:
    turns = history(20, tokens=30)
    turns.append(TurnView(position=20, role="user", text=message, tokens=count(message)))
    units = {f"t:{i}": turn_unit(i) for i in range(10)}
    units["s:0"] = segment_unit("s:0", 0, 9, "summary of the first ten turns")
    values: dict[str, object] = {
        "watermark": 10,
        "scored": scored,
        "units": units,
        "topic_hint": [("travel", 8, "trips and bookings"), ("cooking", 4, "recipes")],
        "stable_summaries": [tag_summary("travel", "Went to Lisbon in May.")],
    }
    values.update(changes)
    return inputs(turns, **values)


def test_stable_block_is_identical_across_requests_with_different_messages() -> None:
    first = plan_payload(compacted_request("where did I travel?", hits("t:3", "s:0")))
    second = plan_payload(compacted_request("what did I cook?", hits("t:7", "t:1")))
    assert first.stable_block == second.stable_block
    assert first.stable_block.startswith("<virtual-context>")
    assert "<context-topics>\ntravel (8 turns): trips and bookings\ncooking (4 turns)" in (
        first.stable_block
    )
    assert "Went to Lisbon in May." in first.stable_block
    assert first.recall_block != second.recall_block
    assert "fact3" not in first.stable_block


def test_stable_block_ignores_input_order_and_changes_only_with_its_summaries() -> None:
    summaries = [tag_summary("b", "Bee.", 5, 9), tag_summary("a", "Ay.", 0, 4)]
    base = plan_payload(compacted_request("q", [], stable_summaries=summaries))
    reordered = plan_payload(compacted_request("q", [], stable_summaries=summaries[::-1]))
    assert base.stable_block == reordered.stable_block
    assert base.stable_block.index("Ay.") < base.stable_block.index("Bee.")
    grown = [tag_summary("b", "Bee. And more.", 5, 9), summaries[1]]
    assert plan_payload(compacted_request("q", [], stable_summaries=grown)).stable_block != (
        base.stable_block
    )


def test_consecutive_requests_share_the_prefix_up_to_the_earlier_last_turn() -> None:
    earlier = plan_payload(compacted_request("first question", hits("t:2")))
    request = compacted_request("first question", hits("t:8"))
    request.turns.append(TurnView(position=21, role="assistant", text="answer", tokens=5))
    request.turns.append(TurnView(position=22, role="user", text="second", tokens=5))
    later = plan_payload(request)
    assert later.stable_block == earlier.stable_block
    assert later.kept_positions[: len(earlier.kept_positions)] == earlier.kept_positions


def test_stable_block_stays_within_its_share() -> None:
    big = [tag_summary(f"t{i}", "word " * 100, i, i) for i in range(5)]
    plan = plan_payload(compacted_request("q", [], stable_summaries=big))
    assert plan.tokens_by_part["stable"] <= 0.3 * (1_000 - 100)
    assert plan.stable_left_out == [f"g:t{i}" for i in range(2, 5)]
    assert "stable block: 2 topics, 2 tag summaries; 3 tag summaries left out: over its share" in (
        plan.reasons
    )


def test_items_over_the_stable_share_are_listed_apart_with_one_reason() -> None:
    topics = [(f"topic{i}", 20 - i, "word " * 60) for i in range(10)]
    late = tag_summary("late", "word " * 300)
    plan = plan_payload(compacted_request("q", [], topic_hint=topics, stable_summaries=[late]))
    names = [name for name, _, _ in topics]
    kept = [name for name in names if f"{name} (" in plan.stable_block]
    assert 0 < len(kept) < len(names)
    assert plan.stable_left_out == [*names[len(kept) :], "g:late"]  # in the order considered
    (reason,) = [reason for reason in plan.reasons if "left out" in reason]
    assert reason == (
        f"stable block: {len(kept)} topics, 0 tag summaries; "
        f"{len(names) - len(kept)} topics and 1 tag summaries left out: over its share"
    )


def test_a_stable_block_with_room_for_everything_leaves_nothing_out() -> None:
    plan = plan_payload(compacted_request("q", []))
    assert plan.stable_left_out == []
    assert "stable block: 2 topics, 1 tag summaries" in plan.reasons
    assert not any("left out" in reason for reason in plan.reasons)


# ---------------------------------------------------------------- recall


def test_recall_prefers_verbatim_turns_in_chronological_order_with_dates() -> None:
    plan = plan_payload(compacted_request("q", hits("t:7", "t:2")))
    assert [key for key, _, _ in plan.recalled] == ["t:7", "t:2"]  # chosen by score
    lines = plan.recall_block.splitlines()
    assert lines[0] == "<recalled-context>"
    assert lines[2].startswith("[2023-05-20] user: ")
    assert lines[2].endswith("fact2")
    assert lines[3].startswith("[2023-05-20] assistant: ")
    assert lines[3].endswith("fact7")
    assert "s:0" not in [key for key, _, _ in plan.recalled]


def test_recall_falls_back_to_the_segment_summary_when_the_turn_does_not_fit() -> None:
    request = compacted_request("q", hits("t:4"))
    request.units["t:4"] = turn_unit(4, words=2_000)
    plan = plan_payload(request)
    assert [key for key, _, _ in plan.recalled] == ["s:0"]
    assert "summary of turns 0-9: summary of the first ten turns" in plan.recall_block
    assert total(plan) <= request.ceiling


def test_recall_skips_window_turns_and_stable_summaries_and_dedupes() -> None:
    request = compacted_request("q", hits("t:15", "g:travel", "t:3", "t:3", "s:0"))
    request.units["t:15"] = turn_unit(15)
    request.units["g:travel"] = request.stable_summaries[0]
    plan = plan_payload(request)
    assert [key for key, _, _ in plan.recalled] == ["t:3", "s:0"]


def test_segment_fully_present_verbatim_is_not_recalled_again() -> None:
    request = compacted_request("q", hits("t:1", "t:2", "s:1"))
    request.units["s:1"] = segment_unit("s:1", 1, 2, "one and two")
    plan = plan_payload(request)
    assert [key for key, _, _ in plan.recalled] == ["t:1", "t:2"]


def test_recall_undated_items_are_labelled() -> None:
    request = compacted_request("q", hits("t:3"))
    request.units["t:3"] = turn_unit(3, day=None)
    assert "[date unknown] assistant:" in plan_payload(request).recall_block


def test_cache_unaware_layout_puts_everything_in_one_block() -> None:
    scored = hits("t:3", "t:5")
    aware = plan_payload(compacted_request("q", scored))
    unaware = plan_payload(compacted_request("q", scored, cache_aware=False))
    assert unaware.recall_block == ""
    assert unaware.stable_block.startswith("<virtual-context>")
    assert unaware.stable_block.endswith("</recalled-context>\n</virtual-context>")
    assert "fact3" in unaware.stable_block
    assert "fact5" in unaware.stable_block
    assert "<context-topics>" in unaware.stable_block
    assert [k for k, _, _ in unaware.recalled] == [k for k, _, _ in aware.recalled]
    assert unaware.kept_positions == aware.kept_positions


def test_stable_block_is_given_up_before_the_protected_turns() -> None:
    request = compacted_request("q", hits("t:3"), ceiling=400)
    for t in request.turns[10:]:
        t.tokens = 140
    for t in request.turns[18:]:
        # the protected turns from the user message that opens them: 270 of the 300 left by fixed
        t.tokens = 90
    plan = plan_payload(request)
    assert plan.stable_block == ""
    assert plan.kept_positions == [18, 19, 20]
    assert plan.window_truncated
    assert total(plan) <= 400
    assert any("stable block given up" in reason for reason in plan.reasons)


def test_last_chain_over_the_ceiling_is_still_sent_and_said() -> None:
    turns = history(6, tokens=50)
    turns[4].tool_calls = ["big"]
    turns[5].tool_results = ["big"]
    turns[5].tokens = 5_000
    plan = plan_payload(inputs(turns, watermark=2))
    assert plan.kept_positions == [4, 5]
    assert plan.tokens_by_part["headroom"] < 0
    assert any("over the ceiling" in reason for reason in plan.reasons)


# ---------------------------------------------------------------- window share


def test_the_window_is_held_to_its_share_and_protected_turns_stay() -> None:
    turns = history(30, tokens=50)  # 1,500 tokens of uncompacted history
    plan = plan_payload(inputs(turns, ceiling=2_000, watermark=4, window_share=0.3))
    room = 2_000 - 100
    window = plan.tokens_by_part["window"]
    assert window <= 0.3 * room
    assert plan.kept_positions[-2:] == [28, 29]  # the protected turns
    assert plan.kept_positions[0] > 4
    assert not plan.window_truncated  # held by policy, not cut for lack of room
    assert any("window held to 30%" in reason for reason in plan.reasons)
    # Without the share the same history is kept whole from the watermark.
    whole = plan_payload(inputs(turns, ceiling=2_000, watermark=4))
    assert whole.kept_positions[0] == 4


def test_the_window_start_moves_in_steps_so_the_cached_prefix_survives() -> None:
    starts = []
    for n in range(20, 80, 2):  # the conversation grows two turns per request
        plan = plan_payload(inputs(history(n, 40), ceiling=3_000, window_share=0.3))
        starts.append(plan.kept_positions[0])
    assert starts == sorted(starts)  # never moves back
    moves = [b - a for a, b in zip(starts, starts[1:], strict=False) if b != a]
    assert moves  # it did move as the window grew …
    assert len(moves) < len(starts) / 3  # … but most requests kept the previous start
    step_turns = int(0.3 * (3_000 - 100)) // 2 // 40
    assert all(move >= step_turns for move in moves)  # and each move is a real jump


def test_turns_passed_over_by_the_window_can_be_recalled() -> None:
    turns = history(30, tokens=50)
    units = {"t:6": turn_unit(6, words=20)}
    plan = plan_payload(
        inputs(turns, ceiling=2_000, watermark=4, window_share=0.3, scored=hits("t:6"), units=units)
    )
    assert 6 not in plan.kept_positions
    assert [key for key, _, _ in plan.recalled] == ["t:6"]
    assert "fact6" in plan.recall_block


def test_a_share_never_splits_a_tool_chain() -> None:
    rng = random.Random(3)
    for _ in range(50):
        turns = []
        for i in range(40):
            calls = [f"c{i}"] if i % 5 == 1 else None
            results = [f"c{i - 1}"] if i % 5 == 2 else None
            turns.append(turn(i, rng.randint(10, 120), calls=calls, results=results))
        plan = plan_payload(inputs(turns, ceiling=2_500, window_share=rng.uniform(0.1, 0.6)))
        assert chain_intact(turns, plan)
        assert plan.kept_positions[0] not in unsafe_cuts(turns) or plan.kept_positions[0] == 0


def _recall_request(best: float, **changes: object) -> PlanInputs:
    """Ten recallable turns of 5 tokens each (room 900 tokens), the best hit at ``best``."""
    keys = [f"t:{i}" for i in range(10)]
    scored = [Scored(key=key, score=best / (rank + 1)) for rank, key in enumerate(keys)]
    return compacted_request("where did I travel?", scored, **changes)


def test_recall_is_held_to_its_share_when_no_hit_is_strong() -> None:
    plan = plan_payload(_recall_request(0.02, recall_share=0.05, recall_confident=0.03))
    # 5 % of the 900 tokens of room: the block's frame and a few items, not all ten
    assert 0 < len(plan.recalled) < 10
    assert plan.tokens_by_part["recall"] <= 45
    assert any("recall held to 5% of the room" in reason for reason in plan.reasons)
    assert [key for key, _, _ in plan.recalled] == [f"t:{i}" for i in range(len(plan.recalled))]


def test_a_strong_best_hit_lifts_the_recall_share() -> None:
    plan = plan_payload(_recall_request(0.04, recall_share=0.05, recall_confident=0.03))
    assert len(plan.recalled) == 10
    assert any("strong: the message is about older memory" in r for r in plan.reasons)


def test_without_a_confidence_threshold_the_share_always_holds() -> None:
    plan = plan_payload(_recall_request(9.0, recall_share=0.05, recall_confident=0.0))
    assert len(plan.recalled) < 10


def test_the_rewrite_layout_ignores_the_recall_share() -> None:
    plan = plan_payload(_recall_request(0.02, recall_share=0.05, cache_aware=False))
    assert len(plan.recalled) == 10


def _reach_request(outside: float, inside: float) -> PlanInputs:
    """Ten recallable turns (best ``outside``) and a hit on a kept turn at ``inside``."""
    keys = [f"t:{i}" for i in range(10)]
    scored = [Scored(key=key, score=outside / (rank + 1)) for rank, key in enumerate(keys)]
    scored.append(Scored(key="t:15", score=inside))
    scored.sort(key=lambda hit: -hit.score)
    request = compacted_request("where did I travel?", scored, recall_share=0.05, recall_reach=0.02)
    request.units["t:15"] = turn_unit(15)
    return request


def test_a_message_reaching_back_past_the_window_lifts_the_recall_share() -> None:
    plan = plan_payload(_reach_request(outside=0.025, inside=0.01))
    assert len(plan.recalled) == 10
    assert any("× the window's best" in reason for reason in plan.reasons)


def test_a_message_going_on_with_the_window_keeps_the_share() -> None:
    # as strong outside, but the kept window matches it about as well
    plan = plan_payload(_reach_request(outside=0.025, inside=0.02))
    assert len(plan.recalled) < 10
    # and outside matches under the reach threshold never lift
    plan = plan_payload(_reach_request(outside=0.015, inside=0.0))
    assert len(plan.recalled) < 10


def test_topics_leave_half_the_stable_share_to_tag_summaries() -> None:
    topics = [(f"topic{i:02d}", 40 - i, "about a thing worth a few words") for i in range(40)]
    summary = tag_summary("travel", "Went to Lisbon in May and to Porto in June.")
    request = compacted_request("q", [], topic_hint=topics, stable_summaries=[summary])
    plan = plan_payload(request)  # a share of 0.30 × 900: far from all 40 topics
    assert "Went to Lisbon in May" in plan.stable_block
    assert "topic00 (40 turns)" in plan.stable_block  # the most discussed come first
    left = [name for name in plan.stable_left_out if name.startswith("topic")]
    assert left
    assert left == sorted(left)  # what did not fit: the least discussed
    assert "g:travel" not in plan.stable_left_out


def test_the_new_message_does_not_count_as_the_window_matching_itself() -> None:
    # the latest turn (20) already stored and scored as the best hit: it is the
    # message, not the window going on with it
    request = _reach_request(outside=0.025, inside=0.0)
    request.units["t:20"] = turn_unit(20)
    request.scored.insert(0, Scored(key="t:20", score=0.05))
    plan = plan_payload(request)
    assert len(plan.recalled) == 10
