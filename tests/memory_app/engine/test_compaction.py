from __future__ import annotations

import random

import pytest

from memory_app.engine.compaction import compaction_plan, fill_level, unsafe_cuts
from memory_app.engine.types import CompactionPlan, CompactionSettings, TurnView

SETTINGS = CompactionSettings(ceiling=1_000, soft=0.70, hard=0.85, target=0.50, protected_turns=2)


def turn(
    position: int,
    tokens: int = 100,
    role: str = "user",
    calls: list[str] | None = None,
    results: list[str] | None = None,
) -> TurnView:
    return TurnView(
        position=position,
        role=role,
        text=f"turn {position}",
        tokens=tokens,
        tool_calls=calls or [],
        tool_results=results or [],
    )


def conversation(*tokens: int) -> list[TurnView]:
    return [turn(i, t, "user" if i % 2 == 0 else "assistant") for i, t in enumerate(tokens)]


def apply(turns: list[TurnView], plan: CompactionPlan) -> int:
    """The watermark after a plan ran (what the compaction service stores)."""
    return plan.end_position


def assert_chains_whole(turns: list[TurnView], plan: CompactionPlan) -> None:
    compacted = set(plan.positions)
    made_in = {c for t in turns if t.position in compacted for c in t.tool_calls}
    for t in turns:
        if t.position not in compacted and t.position >= plan.start_position:
            assert not made_in & set(t.tool_results), f"turn {t.position} split from its call"


def test_fill_level_counts_the_window_from_the_watermark_and_fixed_tokens() -> None:
    turns = conversation(100, 200, 300, 400)

    assert fill_level(turns, 0, 1_000) == pytest.approx(1.0)
    assert fill_level(turns, 2, 1_000) == pytest.approx(0.7)
    assert fill_level(turns, 2, 1_000, fixed_tokens=150) == pytest.approx(0.85)


def test_no_pressure_below_the_soft_threshold_compacts_nothing() -> None:
    plan = compaction_plan(conversation(100, 100, 100, 100, 100, 100), 0, SETTINGS)

    assert plan.pressure == "none"
    assert plan.fill == pytest.approx(0.6)
    assert plan.positions == []
    assert plan.end_position == plan.start_position == 0


def test_soft_pressure_compacts_down_to_the_target_fill() -> None:
    plan = compaction_plan(conversation(*[100] * 8), 0, SETTINGS)

    assert plan.pressure == "soft"
    assert plan.positions == [0, 1, 2]  # 800 → 500 tokens: the target, not just under soft
    assert plan.end_position == 3


def test_hard_pressure_above_the_hard_threshold() -> None:
    plan = compaction_plan(conversation(*[100] * 9), 0, SETTINGS)

    assert plan.pressure == "hard"
    assert plan.positions == [0, 1, 2, 3]


def test_fixed_tokens_push_the_fill_and_the_range() -> None:
    turns = conversation(*[100] * 6)

    assert compaction_plan(turns, 0, SETTINGS).pressure == "none"
    plan = compaction_plan(turns, 0, SETTINGS, fixed_tokens=300)
    assert plan.pressure == "hard"
    assert plan.positions == [0, 1, 2, 3]


def test_the_range_starts_at_the_watermark() -> None:
    turns = conversation(*[100] * 12)

    plan = compaction_plan(turns, 4, SETTINGS)

    assert plan.start_position == 4
    assert plan.positions == [4, 5, 6]
    assert plan.end_position == 7


def test_protected_turns_are_never_compacted() -> None:
    turns = conversation(50, 50, 50, 600, 600)

    plan = compaction_plan(turns, 0, SETTINGS)

    assert plan.pressure == "hard"
    assert plan.positions == [0, 1, 2]
    assert plan.end_position == 3


def test_nothing_to_compact_when_every_turn_is_protected() -> None:
    plan = compaction_plan(conversation(500, 500), 0, SETTINGS)

    assert plan.pressure == "hard"
    assert plan.positions == []
    assert plan.end_position == 0


def test_the_range_extends_to_take_the_answer_to_a_tool_call() -> None:
    turns = [
        turn(0, 100, "user"),
        turn(1, 100, "assistant"),
        turn(2, 100, "assistant", calls=["c1"]),
        turn(3, 100, "tool", results=["c1"]),
        turn(4, 100, "assistant"),
        turn(5, 100, "user"),
        turn(6, 100, "assistant"),
        turn(7, 100, "user"),
    ]

    plan = compaction_plan(turns, 0, SETTINGS)

    assert plan.positions == [0, 1, 2, 3]
    assert_chains_whole(turns, plan)


def test_the_range_stops_before_a_call_whose_answer_is_protected() -> None:
    turns = [
        turn(0, 100, "user"),
        turn(1, 100, "assistant"),
        turn(2, 400, "assistant", calls=["c1", "c2"]),
        turn(3, 100, "tool", results=["c1"]),
        turn(4, 100, "tool", results=["c2"]),
        turn(5, 100, "assistant"),
    ]

    plan = compaction_plan(turns, 0, SETTINGS)

    assert plan.pressure == "hard"
    assert plan.positions == [0, 1]
    assert plan.end_position == 2


def test_a_chain_spanning_several_turns_is_kept_whole() -> None:
    turns = [
        turn(0, 100, "user"),
        turn(1, 100, "assistant", calls=["a"]),
        turn(2, 100, "tool", results=["a"]),
        turn(3, 100, "assistant", calls=["b"]),
        turn(4, 100, "tool", results=["b"]),
        turn(5, 100, "assistant"),
        turn(6, 100, "user"),
        turn(7, 100, "assistant"),
    ]

    assert unsafe_cuts(turns) == {2, 4}
    plan = compaction_plan(turns, 0, SETTINGS)

    assert plan.positions == [0, 1, 2]
    assert_chains_whole(turns, plan)


@pytest.mark.parametrize(
    "turns",
    [
        conversation(*[100] * 8),
        conversation(*[100] * 20),
        conversation(50, 50, 50, 600, 600),
        conversation(300, 300, 300, 300),
        [
            turn(0, 100),
            turn(1, 300, "assistant", calls=["c"]),
            turn(2, 100, "tool"),
            turn(3, 300, "tool", results=["c"]),
        ],
    ],
)
def test_planning_again_after_applying_a_plan_compacts_nothing(turns: list[TurnView]) -> None:
    first = compaction_plan(turns, 0, SETTINGS)
    assert first.pressure != "none"

    again = compaction_plan(turns, apply(turns, first), SETTINGS)

    assert again.pressure == "none" or again.positions == []


def random_conversation(rng: random.Random) -> list[TurnView]:
    turns: list[TurnView] = []
    pending: list[str] = []
    for position in range(rng.randint(1, 30)):
        tokens = rng.choice([10, 50, 100, 400])
        if pending and rng.random() < 0.6:
            answered = [pending.pop(0)]
            turns.append(turn(position, tokens, "tool", results=answered))
        elif rng.random() < 0.3:
            calls = [f"c{position}-{n}" for n in range(rng.randint(1, 2))]
            pending.extend(calls)
            turns.append(turn(position, tokens, "assistant", calls=calls))
        else:
            turns.append(turn(position, tokens, rng.choice(["user", "assistant"])))
    return turns


@pytest.mark.parametrize("seed", range(200))
def test_random_conversations_keep_every_rule(seed: int) -> None:
    rng = random.Random(seed)
    turns = random_conversation(rng)
    settings = CompactionSettings(
        ceiling=1_000, soft=0.7, hard=0.85, target=0.5, protected_turns=rng.randint(0, 4)
    )
    watermark = 0
    for _ in range(3):
        plan = compaction_plan(turns, watermark, settings)
        protected = {t.position for t in turns[len(turns) - settings.protected_turns :]}
        if settings.protected_turns:
            assert not protected & set(plan.positions)
        assert plan.positions == list(range(watermark, plan.end_position))
        assert_chains_whole(turns, plan)
        watermark = apply(turns, plan)
    again = compaction_plan(turns, watermark, settings)
    assert again.pressure == "none" or again.positions == []
