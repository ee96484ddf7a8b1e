from __future__ import annotations

from datetime import date

import pytest

from memory_app.engine.summariser import (
    ExtractiveSummariser,
    LLMSummariser,
    info_score,
    summary_budget,
)
from memory_app.engine.types import CompactionSettings, SegmentPlan, TurnView


def count(text: str) -> int:
    return len(text.split())


def turns_of(*lines: tuple[str, str], start: int = 0) -> list[TurnView]:
    return [TurnView(position=start + i, role=r, text=t) for i, (r, t) in enumerate(lines)]


def plan_for(
    turns: list[TurnView], tags: list[str] | None = None, day: date | None = None
) -> SegmentPlan:
    positions = [t.position for t in turns]
    return SegmentPlan(
        start_position=positions[0],
        end_position=positions[-1],
        positions=positions,
        tags=tags or [],
        tokens=sum(count(t.text) for t in turns),
        session_date=day,
    )


CAMERA = turns_of(
    ("user", "Hi there! I paid $1,249 for the Sony A7 IV on March 3. Is that a good price?"),
    (
        "assistant",
        "Sure, happy to help! That is about $250 below the launch price of $1,499. "
        "It is a very good deal.",
    ),
    ("user", "Thanks. I decided to pair it with the Sigma 24-70 lens instead of the kit lens."),
    ("assistant", "Great question. The Sigma 24-70 is sharper than the kit lens."),
)


class FakeLLM:
    """An LLM at the edge: returns a canned reply and records what it was asked."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[dict[str, object]] = []

    def complete(self, *, role: str, system: str, prompt: str, max_tokens: int) -> str:
        self.calls.append(
            {"role": role, "system": system, "prompt": prompt, "max_tokens": max_tokens}
        )
        return self.reply


class BrokenLLM:
    def complete(self, *, role: str, system: str, prompt: str, max_tokens: int) -> str:
        raise ConnectionError("upstream unreachable")


# ------------------------------------------------------------- extractive


def test_extractive_summary_keeps_numbers_and_names_and_drops_filler() -> None:
    summary = ExtractiveSummariser().summarise(plan_for(CAMERA), CAMERA, 60, count)

    assert "I paid $1,249 for the Sony A7 IV on March 3." in summary.text
    assert "Sure, happy to help!" not in summary.text
    assert "Great question." not in summary.text
    assert "Hi there!" not in summary.text


def test_extractive_summary_is_chronological_with_speakers_and_the_session_date() -> None:
    plan = plan_for(CAMERA, day=date(2023, 5, 20))

    summary = ExtractiveSummariser().summarise(plan, CAMERA, 200, count)

    lines = summary.text.splitlines()
    assert lines[0] == "[2023-05-20]"
    assert [line.split(":")[0] for line in lines[1:]] == ["user", "assistant", "user", "assistant"]
    assert lines[1].startswith("user: I paid $1,249")
    assert summary.text.index("$1,249") < summary.text.index("$1,499") < summary.text.index("Sigma")


def test_sentences_of_one_turn_share_a_line() -> None:
    summary = ExtractiveSummariser().summarise(plan_for(CAMERA), CAMERA, 200, count)

    assert (
        "assistant: That is about $250 below the launch price of $1,499. It is a very good deal."
        in summary.text.splitlines()
    )


@pytest.mark.parametrize("budget", [5, 12, 20, 35, 80])
def test_extractive_summary_respects_the_size_target(budget: int) -> None:
    turns = CAMERA + turns_of(
        *[
            ("user", f"My order #{n} shipped to Berlin on May {n} for ${n * 10}.")
            for n in range(1, 30)
        ],
        start=len(CAMERA),
    )
    plan = plan_for(turns, day=date(2023, 5, 20))

    summary = ExtractiveSummariser().summarise(plan, turns, budget, count)

    assert summary.tokens == count(summary.text) <= budget


def test_the_most_informative_sentence_wins_a_tight_budget() -> None:
    summary = ExtractiveSummariser().summarise(plan_for(CAMERA), CAMERA, 14, count)

    assert summary.text == "user: I paid $1,249 for the Sony A7 IV on March 3."


def test_near_identical_sentences_are_kept_once() -> None:
    turns = turns_of(
        ("user", "I moved to Lisbon in June 2021 with my partner."),
        ("assistant", "Noted."),
        ("user", "As I said, I moved to Lisbon in June 2021 with my partner."),
    )

    summary = ExtractiveSummariser().summarise(plan_for(turns), turns, 100, count)

    assert summary.text.count("Lisbon") == 1


def test_only_the_plans_turns_are_summarised_and_its_tags_kept() -> None:
    other = turns_of(("user", "My cat Mochi was born on 2019-04-01."), start=10)
    plan = plan_for(CAMERA, tags=["camera", "photography"])

    summary = ExtractiveSummariser().summarise(plan, CAMERA + other, 200, count)

    assert "Mochi" not in summary.text
    assert summary.tags == ["camera", "photography"]


def test_info_score_ranks_facts_above_filler() -> None:
    fact = info_score("I paid $1,249 for the Sony A7 IV on March 3.", "user")
    code = info_score("We switched the parser to use json_from_model_text now.", "assistant")
    filler = info_score("Sure, happy to help!", "assistant")

    assert fact > code > 0 > filler


def test_summary_budget_is_a_capped_share_of_the_segment() -> None:
    settings = CompactionSettings(summary_ratio=0.25, summary_max_tokens=300)

    assert summary_budget(400, settings) == 100
    assert summary_budget(4_000, settings) == 300
    assert summary_budget(0, settings) == 1


# ------------------------------------------------------------- LLM


def test_llm_summary_from_fenced_json_adds_tags_after_the_plans() -> None:
    llm = FakeLLM(
        'Here you go:\n```json\n{"summary": "The user paid $1,249 for a Sony A7 IV.", '
        '"tags": ["Sony A7 IV", "camera"]}\n```'
    )
    plan = plan_for(CAMERA, tags=["camera", "budget"], day=date(2023, 5, 20))

    summary = LLMSummariser(llm).summarise(plan, CAMERA, 60, count)

    assert summary.text == "[2023-05-20]\nThe user paid $1,249 for a Sony A7 IV."
    assert summary.tags == ["camera", "budget", "sony-a7-iv"]
    assert summary.tokens == count(summary.text)


def test_llm_is_asked_for_json_with_the_turns_the_date_and_the_tags() -> None:
    llm = FakeLLM('{"summary": "x", "tags": []}')
    plan = plan_for(CAMERA, tags=["camera"], day=date(2023, 5, 20))

    LLMSummariser(llm).summarise(plan, CAMERA, 60, count)

    [call] = llm.calls
    assert call["role"] == "compactor"
    assert '"summary"' in str(call["system"])
    assert '"tags"' in str(call["system"])
    prompt = str(call["prompt"])
    assert "2023-05-20" in prompt
    assert "camera" in prompt
    assert "user: Hi there! I paid $1,249 for the Sony A7 IV on March 3." in prompt


def test_llm_summary_after_a_think_block() -> None:
    llm = FakeLLM(
        '<think>The user bought a camera; keep the price.</think>\n{"summary": "Paid $1,249.", "tags": []}'
    )

    summary = LLMSummariser(llm).summarise(plan_for(CAMERA, tags=["camera"]), CAMERA, 60, count)

    assert summary.text == "Paid $1,249."
    assert summary.tags == ["camera"]


def test_llm_tags_never_remove_the_plans_tags() -> None:
    llm = FakeLLM('{"summary": "Camera talk.", "tags": ["lens"]}')

    summary = LLMSummariser(llm).summarise(
        plan_for(CAMERA, tags=["camera", "budget"]), CAMERA, 60, count
    )

    assert summary.tags == ["camera", "budget", "lens"]


@pytest.mark.parametrize(
    "reply",
    [
        "I could not summarise this conversation.",
        '{"summary": "", "tags": []}',
        '{"summary": "ok", "tags": "camera"}',
        '["The user paid $1,249."]',
        "<think>still thinking about {",
    ],
)
def test_llm_junk_falls_back_to_the_extractive_summary(reply: str) -> None:
    plan = plan_for(CAMERA, tags=["camera"], day=date(2023, 5, 20))

    summary = LLMSummariser(FakeLLM(reply)).summarise(plan, CAMERA, 60, count)

    assert summary == ExtractiveSummariser().summarise(plan, CAMERA, 60, count)


def test_a_failing_llm_falls_back_to_the_extractive_summary() -> None:
    plan = plan_for(CAMERA, tags=["camera"])

    summary = LLMSummariser(BrokenLLM()).summarise(plan, CAMERA, 60, count)

    assert "I paid $1,249 for the Sony A7 IV on March 3." in summary.text
    assert summary.tags == ["camera"]


def test_an_llm_summary_over_the_target_is_cut_at_a_sentence() -> None:
    long = " ".join(f"Fact number {n} is here." for n in range(40))
    llm = FakeLLM(f'{{"summary": "{long}", "tags": []}}')

    summary = LLMSummariser(llm).summarise(plan_for(CAMERA), CAMERA, 20, count)

    assert summary.tokens <= 20
    assert (
        summary.text
        == "Fact number 0 is here. Fact number 1 is here. Fact number 2 is here. Fact number 3 is here."
    )


# ------------------------------------------------------------- tag summaries

SEGMENTS = [
    (40, "[2023-06-02]\nuser: I sold the Sony A7 IV for $1,100 and switched to a Fujifilm X-T5."),
    (
        0,
        "[2023-05-20]\nuser: I paid $1,249 for the Sony A7 IV on March 3.\nassistant: Sure, happy to help!",
    ),
    (20, "[2023-05-27]\nuser: My sister Ana visits in July. The camera needs a new battery."),
]


def test_tag_summary_is_chronological_and_keeps_the_tagged_facts() -> None:
    summary = ExtractiveSummariser().tag_summary("camera", SEGMENTS, 200, count)

    text = summary.text
    assert summary.tags == ["camera"]
    assert text.index("[2023-05-20]") < text.index("$1,249") < text.index("[2023-05-27]")
    assert text.index("new battery") < text.index("[2023-06-02]") < text.index("$1,100")
    assert "happy to help" not in text


def test_tag_summary_prefers_sentences_about_the_tag_under_a_tight_budget() -> None:
    summary = ExtractiveSummariser().tag_summary("camera", SEGMENTS[2:], 12, count)

    assert "The camera needs a new battery." in summary.text
    assert "Ana" not in summary.text
    assert summary.tokens <= 12


def test_llm_tag_summary_and_its_fallback() -> None:
    llm = FakeLLM(
        '```json\n{"summary": "Bought a Sony A7 IV, later sold it for $1,100.", "tags": ["x"]}\n```'
    )

    summary = LLMSummariser(llm).tag_summary("camera", SEGMENTS, 60, count)
    fallback = LLMSummariser(BrokenLLM()).tag_summary("camera", SEGMENTS, 60, count)

    assert summary.text == "Bought a Sony A7 IV, later sold it for $1,100."
    assert summary.tags == ["camera"]
    assert "Topic: camera" in str(llm.calls[0]["prompt"])
    assert str(llm.calls[0]["prompt"]).index("$1,249") < str(llm.calls[0]["prompt"]).index("$1,100")
    assert fallback == ExtractiveSummariser().tag_summary("camera", SEGMENTS, 60, count)


def test_a_summary_is_never_just_its_date_header() -> None:
    from memory_app.engine.summariser import ExtractiveSummariser
    from memory_app.engine.types import SegmentPlan, TurnView

    long_sentence = "I finally booked the ceramics workshop in Kyoto for the second week " * 3
    turns = [
        TurnView(position=0, role="user", text=long_sentence, tokens=60, session_date=None),
        TurnView(position=1, role="assistant", text="Noted.", tokens=2, session_date=None),
    ]
    plan = SegmentPlan(start_position=0, end_position=1, positions=[0, 1], tokens=62, tags=[])
    summary = ExtractiveSummariser().summarise(plan, turns, 15, lambda t: len(t.split()))
    assert "ceramics workshop" in summary.text
    assert summary.text.endswith("…")
