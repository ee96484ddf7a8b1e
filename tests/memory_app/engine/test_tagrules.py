from __future__ import annotations

from memory_app.engine.assembly import plan_payload
from memory_app.engine.tagrules import TagRules
from memory_app.engine.types import MemoryUnit, Scored
from tests.memory_app.engine.test_assembly import compacted_request, tag_summary


def _turn(position: int, *tags: str) -> MemoryUnit:
    return MemoryUnit("turn", f"t:{position}", f"fact{position}", list(tags), position, position)


def test_the_highest_matching_priority_wins_and_no_rule_means_zero() -> None:
    rules = TagRules([("decision*", 5, 0), ("*", 1, 0), ("budget", 9, 0)], [])
    assert rules.priority(["decision-db"]) == 5
    assert rules.priority(["Budget", "decision-db"]) == 9  # patterns match case-blind
    assert rules.priority(["travel"]) == 1
    assert TagRules([("x", 3, 0)], []).priority(["y"]) == 0
    assert not TagRules([], [])


def test_a_tag_ages_out_ttl_turns_after_its_last_use() -> None:
    units = [_turn(3, "scratch"), _turn(10, "scratch"), _turn(11, "travel")]
    rules = TagRules([("scratch", 0, 5)], units)
    assert not rules.aged(["scratch"], now=15)  # last used at 10: 5 turns ago
    assert rules.aged(["scratch"], now=16)
    assert not rules.aged(["travel"], now=100)  # no rule with a ttl for it
    assert not rules.aged(["never-used"], now=100)


def test_hits_on_priority_tags_are_recalled_first_within_the_share() -> None:
    keys = [f"t:{i}" for i in range(10)]
    scored = [Scored(key=key, score=1.0 / (rank + 1)) for rank, key in enumerate(keys)]
    request = compacted_request("q", scored, recall_share=0.03, tag_rules=[("pinned", 5, 0)])
    request.units["t:9"].tags = ["pinned"]  # the weakest hit
    plan = plan_payload(request)
    recalled = [key for key, _, _ in plan.recalled]
    assert recalled[0] == "t:9"
    assert len(recalled) < 10


def test_units_of_an_aged_tag_are_left_out_of_the_recall_and_the_stable_block() -> None:
    scored = [Scored(key="t:2", score=1.0), Scored(key="t:5", score=0.5)]
    request = compacted_request(
        "q",
        scored,
        tag_rules=[("scratch", 0, 3)],
        stable_summaries=[
            tag_summary("scratch", "Temporary notes."),
            tag_summary("travel", "Lisbon."),
        ],
    )
    request.units["t:2"].tags = ["scratch"]  # last used at turn 2, now is turn 20
    request.stable_summaries[0].tags = ["scratch"]
    request.stable_summaries[1].tags = ["travel"]
    plan = plan_payload(request)
    assert [key for key, _, _ in plan.recalled] == ["t:5"]
    assert "Temporary notes." not in plan.stable_block
    assert "Lisbon." in plan.stable_block


def test_priority_tag_summaries_lead_the_stable_block() -> None:
    first, second = tag_summary("a", "Ay.", 0, 4), tag_summary("b", "Bee.", 5, 9)
    first.tags, second.tags = ["a"], ["b"]
    request = compacted_request("q", [], stable_summaries=[first, second], tag_rules=[("b", 2, 0)])
    block = plan_payload(request).stable_block
    assert block.index("Bee.") < block.index("Ay.")
