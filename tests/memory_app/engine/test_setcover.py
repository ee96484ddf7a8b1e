from __future__ import annotations

import random

import pytest

from memory_app.engine.setcover import summaries_to_rebuild, tag_cover


def test_greedy_cover_takes_the_broadest_tag_first_and_the_fewest_tags() -> None:
    segments = {
        1: {"camera", "sony"},
        2: {"camera", "lens"},
        3: {"camera", "budget"},
        4: {"camera", "sony"},
        5: {"sourdough", "oven"},
        6: {"sourdough"},
        7: {"budget", "oven"},
        8: {"sourdough"},
    }

    assert tag_cover(segments) == ["camera", "sourdough", "budget"]


def test_ties_go_to_the_more_specific_tag_then_the_name() -> None:
    segments = {
        1: {"photography", "sony"},
        2: {"photography", "sony"},
        3: {"photography"},
        4: {"travel"},
    }

    assert tag_cover(segments) == ["photography", "travel"]  # most uncovered segments first
    # equal gain: the tag used in fewer segments overall is the more specific one
    assert tag_cover({1: {"sony", "photography"}}, {"photography": 40, "sony": 3}) == ["sony"]
    assert tag_cover({1: {"sony", "photography"}}, {"photography": 3, "sony": 40}) == [
        "photography"
    ]
    assert tag_cover({1: {"beta", "alpha"}}) == ["alpha"]


def test_segments_without_tags_are_ignored() -> None:
    assert tag_cover({1: set(), 2: {"camera"}, 3: set()}) == ["camera"]
    assert tag_cover({}) == []
    assert tag_cover({1: set()}) == []


@pytest.mark.parametrize("seed", range(50))
def test_the_cover_covers_every_tagged_segment(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"t{n}" for n in range(12)]
    segments = {i: set(rng.sample(names, rng.randint(0, 3))) for i in range(rng.randint(0, 30))}

    cover = tag_cover(segments)

    assert len(cover) == len(set(cover))
    for tags in segments.values():
        assert not tags or tags & set(cover)


def test_summaries_are_rebuilt_only_when_new_segments_arrived() -> None:
    cover = ["camera", "sourdough", "budget", "travel"]
    covered_until = {"camera": 120, "sourdough": 80, "travel": 10}
    segment_ends = {"camera": 150, "sourdough": 80, "budget": 60}

    assert summaries_to_rebuild(cover, covered_until, segment_ends) == ["camera", "budget"]


def test_nothing_to_rebuild_when_every_summary_is_current() -> None:
    ends = {"camera": 150, "sourdough": 80}

    assert summaries_to_rebuild(["camera", "sourdough"], dict(ends), ends) == []
