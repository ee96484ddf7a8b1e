from __future__ import annotations

import copy

from memory_app.engine.keyphrase import KeyphraseTagger, fact_sentences
from memory_app.engine.types import TagVocabulary, TurnTagging, TurnView

DATABASE_TURN = "Our Postgres index on the orders table is bloated and queries are slow."


def _turns(*texts: str | tuple[str, str]) -> list[TurnView]:
    turns = []
    for position, item in enumerate(texts):
        role, text = item if isinstance(item, tuple) else ("user", item)
        turns.append(TurnView(position=position, role=role, text=text))
    return turns


def _tag(
    *texts: str | tuple[str, str], vocab: TagVocabulary | None = None, **kw: int
) -> list[TurnTagging]:
    return KeyphraseTagger().tag_turns(_turns(*texts), vocab or TagVocabulary(), **kw)


def test_tags_are_canonical_content_words() -> None:
    [tagging] = _tag("Our Kubernetes clusters keep crashing after the Helm upgrade.")
    assert "kubernetes" in tagging.tags
    assert "cluster" in tagging.tags  # folded, never "clusters"
    assert all(tag == tag.lower() and " " not in tag for tag in tagging.tags)
    assert tagging.new_tags == tagging.tags


def test_later_turn_converges_on_existing_vocabulary() -> None:
    vocab = TagVocabulary(counts={"postgres": 5, "database": 8})
    [tagging] = _tag("How do I back up my Postgres databases every night?", vocab=vocab)
    assert tagging.tags[:2] == ["postgres", "database"]
    assert "postgres-database" not in tagging.tags
    assert "databases" not in tagging.tags
    assert tagging.new_tags == [tag for tag in tagging.tags if tag not in vocab.counts]


def test_existing_tag_outranks_a_fresh_word_said_as_often() -> None:
    vocab = TagVocabulary(counts={"terraform": 3})
    [tagging] = _tag("The terraform plan for networking keeps failing.", vocab=vocab)
    assert tagging.tags[0] == "terraform"


def test_tags_converge_within_one_batch() -> None:
    first, _, third = _tag(
        "We run Terraform modules for the staging cluster.",
        "Unrelated: my sourdough starter smells of acetone.",
        "The terraform module for networking keeps failing.",
    )
    assert {"terraform", "module"} <= set(first.tags)
    assert {"terraform", "module"} <= set(third.tags)
    # Created by the first turn, so new to the vocabulary on both.
    assert "module" in third.new_tags


def test_max_tags_is_respected() -> None:
    tagger = KeyphraseTagger(max_tags=1)
    [tagging] = tagger.tag_turns(_turns(DATABASE_TURN), TagVocabulary())
    assert len(tagging.tags) == 1


def test_short_reply_inherits_the_previous_tags() -> None:
    first, second = _tag(DATABASE_TURN, "ok do that")
    assert first.tags
    assert second.tags == first.tags
    assert second.fact_signals == []


def test_short_reply_with_weak_words_still_inherits() -> None:
    first, second = _tag(DATABASE_TURN, "Can you make it shorter?")
    assert second.tags == first.tags


def test_short_reply_puts_its_own_words_before_the_inherited_tags() -> None:
    first, second = _tag(DATABASE_TURN, "and the intro?")
    assert second.tags == ["intro", *first.tags[:2]]


def test_no_lookback_means_no_inheritance() -> None:
    _, second = _tag(DATABASE_TURN, "ok do that", lookback=0)
    assert second.tags == []


def test_topic_shift_breaks_inheritance() -> None:
    first, second = _tag(DATABASE_TURN, "By the way, what about a trip to Lisbon?")
    assert "lisbon" in second.tags
    assert not set(first.tags) & set(second.tags)


def test_short_turn_naming_a_new_proper_noun_shifts_topic() -> None:
    _, second = _tag(DATABASE_TURN, "What about Kubernetes?")
    assert second.tags == ["kubernetes"]


def test_short_turn_about_the_same_topic_keeps_the_window() -> None:
    first, second = _tag(DATABASE_TURN, "and the index again?")
    assert "index" in second.tags
    assert set(second.tags) <= set(first.tags)


def test_history_seeds_the_lookback_window() -> None:
    history = [TurnView(position=0, role="user", text=DATABASE_TURN, tags=["postgres", "index"])]
    turns = [TurnView(position=1, role="user", text="yes please")]
    [tagging] = KeyphraseTagger().tag_turns(turns, TagVocabulary(), history=history)
    assert tagging.tags == ["postgres", "index"]
    assert tagging.new_tags == ["postgres", "index"]


def test_tool_turns_inherit() -> None:
    first, second = _tag(DATABASE_TURN, ("tool", '{"rows": 1200, "status": "ok", "elapsed": 3}'))
    assert second.tags == first.tags


def test_related_lists_co_occurring_tags() -> None:
    taggings = _tag(
        "Our Kubernetes ingress drops websocket connections.",
        "The Kubernetes ingress timeout is sixty seconds.",
        "Kubernetes autoscaling flaps whenever the node pool drains.",
    )
    assert "kubernetes" in taggings[2].tags
    assert "ingress" not in taggings[2].tags
    assert taggings[2].related == ["ingress"]


def test_stop_words_numbers_and_code_are_not_tags() -> None:
    [tagging] = _tag("Yes, 2024 is fine. Thanks!\n```python\nimport numpy\nnumpy.zeros(3)\n```")
    assert tagging.tags == []


def test_vocabulary_is_not_mutated() -> None:
    vocab = TagVocabulary(counts={"postgres": 5}, aliases={"pg": "postgres"})
    before = copy.deepcopy(vocab)
    _tag(DATABASE_TURN, "What about Kubernetes?", vocab=vocab)
    assert vocab == before


def test_tagging_is_deterministic() -> None:
    texts = (DATABASE_TURN, "ok do that", "I moved to Berlin and my budget is $3,000.")
    assert _tag(*texts) == _tag(*texts)


def test_fact_signals_find_first_person_statements_and_decisions() -> None:
    text = (
        "Can you help me? I think so. I moved to Berlin last year. "
        "My budget is $3,000. We decided to use Postgres. What is my budget?"
    )
    assert fact_sentences(text) == [
        "I moved to Berlin last year.",
        "My budget is $3,000.",
        "We decided to use Postgres.",
    ]


def test_fact_signals_from_the_assistant_are_decisions_only() -> None:
    text = "I recommend Postgres. You decided to use Redis for caching. I am happy to help."
    assert fact_sentences(text, role="assistant") == ["You decided to use Redis for caching."]


def test_fact_signals_reach_the_tagging() -> None:
    [tagging] = _tag("I moved to Berlin last year and my budget is $3,000 for the trip.")
    assert tagging.fact_signals == [
        "I moved to Berlin last year and my budget is $3,000 for the trip."
    ]
    assert "berlin" in tagging.tags


def test_date_headers_give_no_tags() -> None:
    [tagging] = _tag(
        "[2023/05/30 (Tue) 20:08] Tuesday plans: the pottery class and the pottery kiln"
    )
    assert "pottery" in tagging.tags
    assert not {"tue", "2023", "05", "30", "20", "08"} & set(tagging.tags)
