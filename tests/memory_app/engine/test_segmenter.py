from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest

from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.segmenter import segments_plan
from memory_app.engine.types import CompactionSettings, SegmentPlan, TurnView

SETTINGS = CompactionSettings(segment_max_tokens=2_000, segment_max_turns=12, gap_hours=6.0)
START = datetime(2024, 5, 20, 9, 0, tzinfo=UTC)


def turn(
    position: int,
    role: str,
    tags: list[str] | None = None,
    *,
    text: str = "",
    tokens: int = 50,
    day: date | None = None,
    at: datetime | None = None,
    calls: list[str] | None = None,
    results: list[str] | None = None,
) -> TurnView:
    return TurnView(
        position=position,
        role=role,
        text=text or f"turn {position}",
        tokens=tokens,
        session_date=day,
        created_at=at,
        tags=tags or [],
        tool_calls=calls or [],
        tool_results=results or [],
    )


def exchanges(*tag_sets: list[str], start: int = 0) -> list[TurnView]:
    """A user turn and its answer per tag set, both carrying those tags."""
    turns: list[TurnView] = []
    for n, tags in enumerate(tag_sets):
        turns.append(turn(start + 2 * n, "user", tags))
        turns.append(turn(start + 2 * n + 1, "assistant", tags))
    return turns


def spans(plans: list[SegmentPlan]) -> list[tuple[int, int]]:
    return [(p.start_position, p.end_position) for p in plans]


def assert_partition(turns: list[TurnView], plans: list[SegmentPlan]) -> None:
    positions = [p for plan in plans for p in plan.positions]
    assert positions == sorted(t.position for t in turns)
    for plan in plans:
        assert plan.positions == list(range(plan.start_position, plan.end_position + 1))


def test_turns_sharing_tags_stay_in_one_segment() -> None:
    turns = exchanges(["camera", "budget"], ["camera"], ["camera", "lens"])

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 5)]


def test_a_user_turn_on_new_tags_starts_a_segment() -> None:
    turns = exchanges(["camera"], ["camera", "lens"], ["sourdough"], ["sourdough", "oven"])

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 3), (4, 7)]


def test_an_answer_stays_with_its_question_even_on_other_tags() -> None:
    turns = [
        turn(0, "user", ["camera"]),
        turn(1, "assistant", ["travel"]),
        turn(2, "user", ["camera"]),
        turn(3, "assistant", ["camera"]),
    ]

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 3)]


def test_embeddings_split_untagged_turns_on_a_change_of_subject() -> None:
    texts = [
        "which mirrorless camera body and lens should I buy for birding",
        "for birding a mirrorless camera body with a long lens works well",
        "what lens and camera settings for birding in low light",
        "raise iso on the camera and open the lens for birding",
        "how long should sourdough bread proof in a cold oven overnight",
        "sourdough bread proofs overnight in the fridge before the oven",
    ]
    turns = [turn(i, "user" if i % 2 == 0 else "assistant", text=t) for i, t in enumerate(texts)]
    vectors = HashingEmbedder(256).encode(texts)

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 5)]  # no signal: one segment
    assert spans(segments_plan(turns, SETTINGS, vectors)) == [(0, 3), (4, 5)]


def test_a_turn_without_text_gives_no_embedding_signal() -> None:
    turns = exchanges(["camera"], [])
    vectors = np.zeros((4, 8), dtype=np.float32)
    vectors[:2, 0] = 1.0

    assert spans(segments_plan(turns, SETTINGS, vectors)) == [(0, 3)]


def test_a_change_of_session_date_forces_a_boundary() -> None:
    turns = exchanges(["camera"], ["camera"], ["camera"])
    for t in turns[:2]:
        t.session_date = date(2023, 5, 20)
    for t in turns[2:]:
        t.session_date = date(2023, 5, 27)

    plans = segments_plan(turns, SETTINGS)

    assert spans(plans) == [(0, 1), (2, 5)]
    assert [p.session_date for p in plans] == [date(2023, 5, 20), date(2023, 5, 27)]


def test_a_long_gap_between_turns_forces_a_boundary() -> None:
    turns = exchanges(["camera"], ["camera"], ["camera"])
    for n, t in enumerate(turns):
        t.created_at = (
            START + timedelta(minutes=n) + (timedelta(hours=7) if n >= 3 else timedelta())
        )

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 2), (3, 5)]


def test_a_short_gap_does_not_split() -> None:
    turns = exchanges(["camera"], ["camera"])
    for n, t in enumerate(turns):
        t.created_at = START + timedelta(hours=5 * n)

    assert spans(segments_plan(turns, SETTINGS)) == [(0, 3)]


def test_the_turn_cap_forces_a_boundary_before_a_user_turn() -> None:
    turns = exchanges(*[["camera"]] * 5)
    settings = CompactionSettings(segment_max_tokens=10_000, segment_max_turns=4)

    assert spans(segments_plan(turns, settings)) == [(0, 3), (4, 7), (8, 9)]


def test_the_token_cap_forces_a_boundary() -> None:
    turns = exchanges(*[["camera"]] * 4)
    settings = CompactionSettings(segment_max_tokens=120, segment_max_turns=100)

    plans = segments_plan(turns, settings)

    assert spans(plans) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all(p.tokens <= 120 for p in plans)


def test_a_cap_moves_back_to_the_latest_user_turn() -> None:
    turns = [
        turn(0, "user", ["camera"]),
        turn(1, "assistant", ["camera"]),
        turn(2, "user", ["camera"]),
        turn(3, "assistant", ["camera"]),
        turn(4, "assistant", ["camera"]),
    ]
    settings = CompactionSettings(segment_max_tokens=10_000, segment_max_turns=4)

    assert spans(segments_plan(turns, settings)) == [(0, 1), (2, 4)]


def test_a_tool_chain_is_never_split_by_caps_dates_or_topics() -> None:
    turns = [
        turn(0, "user", ["weather"]),
        turn(1, "assistant", ["weather"], calls=["c1"], day=date(2023, 5, 20)),
        turn(2, "tool", ["weather"], tokens=500),
        turn(3, "user", ["sourdough"], day=date(2023, 5, 21)),
        turn(4, "tool", ["weather"], results=["c1"], tokens=500),
        turn(5, "assistant", ["weather"]),
    ]
    settings = CompactionSettings(segment_max_tokens=200, segment_max_turns=2)

    plans = segments_plan(turns, settings)

    holding = [p for p in plans if 1 in p.positions]
    assert holding
    assert {1, 2, 3, 4} <= set(holding[0].positions)
    assert_partition(turns, plans)


def test_segment_fields_sum_and_order_their_turns() -> None:
    turns = [
        turn(7, "user", ["camera", "budget"], tokens=30),
        turn(8, "assistant", ["lens", "camera"], tokens=70, day=date(2023, 5, 20)),
        turn(9, "user", ["camera", "lens"], tokens=20, day=date(2023, 5, 20)),
    ]

    [plan] = segments_plan(list(reversed(turns)), SETTINGS)

    assert plan.positions == [7, 8, 9]
    assert plan.tags == ["camera", "lens", "budget"]
    assert plan.tokens == 120
    assert plan.session_date == date(2023, 5, 20)


def test_embedding_rows_must_match_the_turns() -> None:
    turns = exchanges(["camera"])

    with pytest.raises(ValueError, match="embedding rows"):
        segments_plan(turns, SETTINGS, np.zeros((3, 8), dtype=np.float32))


def test_no_turns_give_no_segments() -> None:
    assert segments_plan([], SETTINGS) == []


@pytest.mark.parametrize("seed", range(100))
def test_random_turns_are_partitioned_without_splitting_chains(seed: int) -> None:
    rng = random.Random(seed)
    turns: list[TurnView] = []
    pending: list[str] = []
    for position in range(rng.randint(1, 40)):
        tags = rng.sample(["a", "b", "c", "d"], rng.randint(0, 2))
        if pending and rng.random() < 0.5:
            turns.append(turn(position, "tool", tags, results=[pending.pop(0)]))
        elif rng.random() < 0.2:
            pending.append(f"c{position}")
            turns.append(turn(position, "assistant", tags, calls=[f"c{position}"]))
        else:
            turns.append(turn(position, rng.choice(["user", "assistant"]), tags))
        turns[-1].tokens = rng.choice([10, 100, 300])
    settings = CompactionSettings(segment_max_tokens=600, segment_max_turns=rng.randint(2, 8))

    plans = segments_plan(turns, settings)

    assert_partition(turns, plans)
    where = {p: i for i, plan in enumerate(plans) for p in plan.positions}
    calls = {c: t.position for t in turns for c in t.tool_calls}
    for t in turns:
        for call in t.tool_results:
            assert where[t.position] == where[calls[call]]
    for plan in plans:
        chained = any(t.tool_calls or t.tool_results for t in turns if t.position in plan.positions)
        if not chained:
            assert len(plan.positions) <= settings.segment_max_turns
            assert plan.tokens <= settings.segment_max_tokens or len(plan.positions) == 1
