from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import pytest

from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.retrieval import RetrievalIndex, expand_to_turns, text_tokens
from memory_app.engine.types import MemoryUnit, Query, RetrievalSettings, Scored

EMBEDDER = HashingEmbedder()
K = 60

TOPICS = [
    ("We planned the kitchen renovation budget and picked oak cabinets", ["kitchen", "budget"]),
    ("The flight to Lisbon leaves on Friday morning from gate twelve", ["travel", "lisbon"]),
    ("My sourdough starter finally bubbled after three days of feeding", ["baking"]),
    ("Tuning postgres vacuum settings for the analytics database", ["database"]),
    ("I adopted a grey cat named Miso from the animal shelter", ["pets"]),
    ("Marathon training went well: I ran eighteen miles on Sunday", ["running"]),
    ("Comparing noise cancelling headphones under two hundred dollars", ["shopping"]),
    ("Booked a pottery class for my sister's birthday", ["gifts"]),
]


def turn(position: int, text: str, tags: Sequence[str] = (), day: date | None = None) -> MemoryUnit:
    return MemoryUnit(
        kind="turn",
        key=f"t:{position}",
        text=text,
        tags=list(tags),
        start_position=position,
        end_position=position,
        session_date=day,
        tokens=len(text.split()),
    )


def build(units: list[MemoryUnit], settings: RetrievalSettings | None = None) -> RetrievalIndex:
    for row, unit in enumerate(units):
        unit.embedding = row
    matrix = EMBEDDER.encode([unit.text for unit in units])
    return RetrievalIndex.build(units, matrix, settings)


def topics() -> list[MemoryUnit]:
    return [turn(i, text, tags) for i, (text, tags) in enumerate(TOPICS)]


def keys(hits: Sequence[Scored]) -> list[str]:
    return [hit.key for hit in hits]


# ---------------------------------------------------------------- each signal alone


def test_tag_signal_alone_ranks_the_tagged_unit_first() -> None:
    hits = build(topics()).search(Query(text="", tags=[("pets", 0.9)]))
    assert keys(hits) == ["t:4"]
    assert set(hits[0].signals) == {"tags"}
    assert hits[0].ranks == {"tags": 1}
    assert "tags: pets" in hits[0].why


def test_tags_compare_after_plural_folding() -> None:
    hits = build(topics()).search(Query(text="", tags=[("budgets", 1.0)]))
    assert keys(hits) == ["t:0"]


def test_related_tags_count_less_than_query_tags() -> None:
    units = topics()
    units[1].tags.append(
        "kitchen"
    )  # the Lisbon turn also carries the query tag, t:0 only the related one
    hits = build(units).search(Query(text="", tags=[("kitchen", 1.0)], related=["budget"]))
    assert keys(hits)[:2] == ["t:0", "t:1"]
    assert hits[0].signals["tags"] > hits[1].signals["tags"]
    assert "related: budget" in hits[0].why


def test_bm25_signal_alone_ranks_the_matching_text_first() -> None:
    hits = build(topics()).search(Query(text="how is my sourdough starter doing?"))
    assert keys(hits) == ["t:2"]
    assert set(hits[0].signals) == {"bm25"}
    assert hits[0].why == ["bm25 #1"]


def test_cosine_signal_alone_ranks_the_nearest_unit_first() -> None:
    vector = EMBEDDER.encode(["the grey cat from the animal shelter"])[0]
    hits = build(topics()).search(Query(text="", embedding=vector))
    assert keys(hits)[0] == "t:4"
    assert set(hits[0].signals) == {"cosine"}
    assert hits[0].why[0].startswith("cosine 0.")


def test_text_tokens_fold_plurals_drop_stop_words_and_keep_numbers() -> None:
    assert text_tokens("The Cabinets we bought in 2023 aren't cheap") == [
        "cabinet",
        "bought",
        "2023",
        "cheap",
    ]


# ---------------------------------------------------------------- fusion


def test_fusion_rewards_agreement_between_signals() -> None:
    units = [
        turn(0, "lisbon lisbon lisbon tram tickets lisbon"),  # best on bm25 alone
        turn(1, "packing list for the trip", ["travel"]),  # best on tags alone
        turn(
            2, "a weekend in lisbon with friends", ["travel"]
        ),  # second on bm25, tied first on tags
        turn(3, "sourdough starter notes"),
    ]
    hits = build(units).search(Query(text="lisbon", tags=[("travel", 1.0)]))
    assert keys(hits)[0] == "t:2"
    assert hits[0].ranks == {"tags": 1, "bm25": 2}
    assert hits[0].score == pytest.approx(1 / (K + 1) + 1 / (K + 2))
    assert hits[1].score == pytest.approx(1 / (K + 1))


def test_signal_weights_are_configurable() -> None:
    units = [turn(0, "lisbon tram tickets"), turn(1, "packing list for the trip", ["travel"])]
    query = Query(text="lisbon", tags=[("travel", 1.0)])
    tags_only = RetrievalSettings(weights={"tags": 1.0, "bm25": 0.0, "cosine": 0.0})
    assert keys(build(units, tags_only).search(query)) == ["t:1"]
    assert keys(build(units).search(query)) == ["t:0", "t:1"]  # a tie, in unit order


# ---------------------------------------------------------------- dampening


def hub_units() -> list[MemoryUnit]:
    units = [turn(i, f"general chatter number {i} about the house", ["home"]) for i in range(8)]
    units.append(turn(8, "we chose walnut cabinets for the kitchen", ["kitchen", "home"]))
    units.append(turn(9, "the carpenter said walnut cabinets take six weeks"))
    return units  # "home" is on 9 of 10 units


def test_a_hub_tag_does_not_dominate_the_ranking() -> None:
    query = Query(text="walnut cabinets delivery", tags=[("home", 1.0)])
    hits = build(hub_units()).search(query)
    assert set(keys(hits[:2])) == {"t:8", "t:9"}
    assert all("tags" not in hit.signals for hit in hits)


def test_without_the_hub_penalty_the_hub_tag_would_dominate() -> None:
    query = Query(text="walnut cabinets delivery", tags=[("home", 1.0)])
    no_penalty = RetrievalSettings(hub_share=1.0)
    hits = build(hub_units(), no_penalty).search(query)
    assert keys(hits)[0] == "t:8"
    assert keys(hits).index("t:9") > keys(hits).index("t:0")


def test_a_rare_tag_outweighs_a_hub_tag_and_the_hub_is_named() -> None:
    query = Query(text="", tags=[("home", 1.0), ("kitchen", 0.4)])
    hits = build(hub_units()).search(query)
    assert keys(hits) == ["t:8"]
    assert "tags: kitchen, home (hub)" in hits[0].why


def test_an_embedding_only_match_is_damped() -> None:
    vector = EMBEDDER.encode(["grey cat animal shelter"])[0]
    query = Query(text="sourdough", embedding=vector)
    hits = build(topics()).search(query)
    assert keys(hits)[:2] == ["t:2", "t:4"]
    assert hits[1].score == pytest.approx(0.5 / (K + 1))
    assert hits[1].why[0].endswith("only (damped)")
    undamped = build(topics(), RetrievalSettings(embedding_only_factor=1.0)).search(query)
    assert undamped[1].score == pytest.approx(1 / (K + 1))


# ---------------------------------------------------------------- time


def gym_units() -> list[MemoryUnit]:
    text = "I went to the climbing gym after work"
    return [
        turn(0, text, day=date(2023, 4, 2)),
        turn(1, text, day=date(2023, 5, 10)),
        turn(2, text, day=date(2023, 5, 28)),
        turn(3, text),  # undated
        turn(4, "my sister called about her new flat", day=date(2023, 5, 11)),
    ]


def test_units_in_the_date_range_are_boosted_and_earlier_ones_penalised() -> None:
    span = (date(2023, 5, 8), date(2023, 5, 14))
    hits = build(gym_units()).search(Query(text="climbing gym", date_range=span))
    by_key = {hit.key: hit for hit in hits}
    assert keys(hits)[0] == "t:1"
    assert "in date range" in by_key["t:1"].why
    assert "before date range" in by_key["t:0"].why
    base = by_key["t:3"].score  # undated: left alone
    assert by_key["t:1"].score == pytest.approx(base * 1.5)
    assert by_key["t:0"].score == pytest.approx(base * 0.8)
    assert by_key["t:2"].score == pytest.approx(base)  # later: it may tell of the range


def test_an_in_range_unit_with_no_signal_still_enters() -> None:
    span = (date(2023, 5, 8), date(2023, 5, 14))
    hits = build(gym_units()).search(Query(text="climbing gym", date_range=span))
    sister = next(hit for hit in hits if hit.key == "t:4")
    assert sister.signals == {}
    assert sister.why == ["in date range"]
    assert sister.score == pytest.approx(0.5 / (K + 1))
    assert keys(hits).index("t:4") > keys(hits).index("t:2")


def order_units() -> list[MemoryUnit]:
    return [
        turn(0, "first climbing gym visit, the bouldering wall was hard and my arms hurt"),
        turn(3, "climbing gym again"),
        turn(7, "climbing gym with Ana, we tried the lead wall"),
        turn(9, "sourdough starter notes"),
    ]


def test_order_hint_first_boosts_the_earliest_match() -> None:
    index = build(order_units())
    assert keys(index.search(Query(text="climbing gym")))[0] == "t:3"
    hits = index.search(Query(text="climbing gym", order_hint="first"))
    assert keys(hits)[0] == "t:0"
    assert "earliest of top 3" in hits[0].why


def test_order_hint_last_boosts_the_latest_match() -> None:
    hits = build(order_units()).search(Query(text="climbing gym", order_hint="last"))
    assert keys(hits)[0] == "t:7"
    assert "latest of top 3" in hits[0].why
    assert "t:9" not in keys(hits)


# ---------------------------------------------------------------- granularity


def segmented() -> list[MemoryUnit]:
    units = [
        turn(3, "Can you suggest a tent for the Yosemite trip?"),
        turn(4, "A three-season tent around two kilos would suit Yosemite in June."),
        turn(5, "Thanks, I ordered the lightweight one."),
        turn(6, "What should I cook tonight?"),
    ]
    segment = MemoryUnit(
        kind="segment",
        key="s:1",
        text="The user planned a Yosemite camping trip and ordered a lightweight tent.",
        tags=["camping"],
        start_position=3,
        end_position=5,
    )
    summary = MemoryUnit(kind="tag_summary", key="g:camping", text="Camping: Yosemite in June.")
    return [*units, segment, summary]


def test_a_segment_and_its_turns_are_both_retrievable() -> None:
    units = segmented()
    index = build(units)
    found = keys(index.search(Query(text="Yosemite tent")))
    assert {"s:1", "t:3", "t:4"} <= set(found)
    assert keys(index.search(Query(text="", tags=[("camping", 1.0)]))) == ["s:1"]


def test_expand_to_turns_maps_a_segment_hit_to_its_turns() -> None:
    units = segmented()
    hits = build(units).search(Query(text="", tags=[("camping", 1.0)]))
    expanded = expand_to_turns(hits, units)
    assert keys(expanded) == ["t:3", "t:4", "t:5"]
    assert all(hit.score == pytest.approx(hits[0].score * 0.3) for hit in expanded)
    assert expanded[0].why[-1] == "via s:1"


def test_a_turn_that_matched_itself_ranks_before_the_rest_of_its_segment() -> None:
    segment = MemoryUnit(kind="segment", key="s:1", text="", start_position=3, end_position=5)
    own = Scored(key="t:4", score=0.010)
    other = Scored(key="t:9", score=0.008)
    hits = [Scored(key="s:1", score=0.020), own, other]
    expanded = expand_to_turns(hits, [segment])
    # t:4 keeps its own score (above the segment's share 0.006); the other turns
    # of the segment come after the unrelated turn hit t:9.
    assert keys(expanded) == ["t:4", "t:9", "t:3", "t:5"]
    assert expanded[0].score == 0.010
    assert expanded[2].score == pytest.approx(0.006)
    assert keys(expand_to_turns(hits, [segment], factor=1.0))[:3] == ["t:3", "t:4", "t:5"]


def test_expand_to_turns_keeps_turns_and_summaries_once() -> None:
    units = segmented()
    hits = build(units).search(Query(text="lightweight tent Yosemite camping"))
    expanded = expand_to_turns(hits, units)
    found = keys(expanded)
    assert len(found) == len(set(found))
    assert "s:1" not in found
    assert {"t:3", "t:4", "t:5", "g:camping"} <= set(found)


def test_expand_to_turns_names_turns_it_was_not_given() -> None:
    segment = MemoryUnit(
        kind="segment", key="s:9", text="old chat", start_position=20, end_position=21
    )
    hits = build([segment]).search(Query(text="old chat"))
    assert keys(expand_to_turns(hits, [segment])) == ["t:20", "t:21"]


# ---------------------------------------------------------------- edges and determinism


def test_nothing_matches_nothing() -> None:
    assert build(topics()).search(Query(text="quantum chromodynamics")) == []
    assert RetrievalIndex.build([], None).search(Query(text="anything")) == []
    assert build(topics()).search(Query(text="sourdough"), limit=0) == []


def test_limit_caps_the_results() -> None:
    hits = build(hub_units()).search(Query(text="general chatter house"), limit=3)
    assert len(hits) == 3


def test_repeated_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        RetrievalIndex.build([turn(1, "a"), turn(1, "b")], None)


def test_units_without_embeddings_are_searched_by_text() -> None:
    index = RetrievalIndex.build(topics(), None)
    vector = EMBEDDER.encode(["sourdough"])[0]
    assert keys(index.search(Query(text="sourdough", embedding=vector))) == ["t:2"]


def test_search_is_deterministic_within_a_process() -> None:
    query = Query(
        text="walnut cabinets for the kitchen",
        tags=[("home", 0.8), ("kitchen", 0.6)],
        embedding=EMBEDDER.encode(["walnut cabinets"])[0],
    )
    first = build(hub_units()).search(query)
    second = build(hub_units()).search(query)
    assert [(h.key, h.score, h.why) for h in first] == [(h.key, h.score, h.why) for h in second]


_SCRIPT = """
from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.retrieval import RetrievalIndex
from memory_app.engine.types import MemoryUnit, Query
texts = ["zeta alpha beta", "beta gamma delta delta", "alpha alpha omega", "gamma beta alpha epsilon"]
units = [MemoryUnit("turn", f"t:{i}", t, [], i, i, None, 0, i) for i, t in enumerate(texts)]
embedder = HashingEmbedder()
index = RetrievalIndex.build(units, embedder.encode(texts))
query = Query(text="alpha beta gamma", embedding=embedder.encode(["alpha beta"])[0])
print([(h.key, repr(h.score), h.why) for h in index.search(query)])
"""


def test_search_is_deterministic_across_hash_seeds() -> None:
    root = Path(__file__).resolve().parents[3]
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_date_stamps_are_not_words_to_match() -> None:
    # A question's date header must not pull in every turn of the same day.
    same_day = turn(0, "[2023/05/30 (Tue) 06:20] Tips for product photos of pottery")
    answer = turn(1, "I used Trello in my previous role as a marketing specialist")
    hits = build([same_day, answer]).search(
        Query(text="[2023/05/30 (Tue) 20:08] What was my previous role?")
    )
    assert keys(hits) == ["t:1"]
