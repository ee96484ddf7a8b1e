from __future__ import annotations

import pytest

from memory_app.engine.canon import (
    MAX_TAG_CHARS,
    TagCanon,
    alias_suggestions,
    tag_canonical,
    tag_fold,
    tag_normalise,
    tag_split_alias,
    tag_split_plan,
    tags_to_split,
    word_fold,
)
from memory_app.engine.types import TagVocabulary, TurnView


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Database Migration", "database-migration"),
        ("  user_auth  flow ", "user-auth-flow"),
        ('"Postgres"', "postgres"),
        ("node.js -- tips!!", "node-js-tips"),
        ("The Kubernetes", "kubernetes"),
        ("Café Zürich", "cafe-zurich"),
        ("database database", "database"),
        ("user's guide", "users-guide"),
    ],
)
def test_normalise_gives_lowercase_hyphenated_names(raw: str, expected: str) -> None:
    assert tag_normalise(raw) == expected


@pytest.mark.parametrize("raw", ["the", "of the", "and so on", "!!!", "   ", "it's"])
def test_normalise_drops_tags_made_only_of_stop_words(raw: str) -> None:
    assert tag_normalise(raw) == ""


def test_normalise_cuts_long_tags_at_a_hyphen() -> None:
    name = tag_normalise("extremely long descriptive tag about database connection pooling")
    assert len(name) <= MAX_TAG_CHARS
    assert not name.endswith("-")
    assert name == "extremely-long-descriptive-tag-about"


@pytest.mark.parametrize(
    ("plural", "singular"),
    [
        ("databases", "database"),
        ("queries", "query"),
        ("boxes", "box"),
        ("branches", "branch"),
        ("caches", "cache"),
        ("movies", "movie"),
        ("statuses", "status"),
        ("aliases", "alias"),
        ("processes", "process"),
        ("indices", "index"),
        ("wolves", "wolf"),
        ("keys", "key"),
    ],
)
def test_fold_turns_plurals_into_singulars(plural: str, singular: str) -> None:
    assert word_fold(plural) == singular


@pytest.mark.parametrize(
    "word",
    ["analysis", "status", "news", "series", "physics", "kubernetes", "postgres", "class", "aws"],
)
def test_fold_leaves_words_that_only_look_plural(word: str) -> None:
    assert word_fold(word) == word


def test_fold_applies_to_every_word_of_a_compound() -> None:
    assert tag_fold("unit-tests") == "unit-test"
    assert tag_fold("sales-reports") == "sales-report"


def test_canonical_folds_a_new_tag() -> None:
    assert tag_canonical("Databases", TagVocabulary()) == "database"


def test_canonical_follows_aliases_to_their_target() -> None:
    vocab = TagVocabulary(
        counts={"postgres": 5}, aliases={"postgresql": "postgres", "pg": "postgresql"}
    )
    assert tag_canonical("PostgreSQL", vocab) == "postgres"
    assert tag_canonical("pg", vocab) == "postgres"


def test_canonical_lands_on_an_existing_name_that_folds_the_same() -> None:
    # An older, unfolded name wins over inventing its folded twin.
    vocab = TagVocabulary(counts={"unit-tests": 3})
    assert tag_canonical("unit test", vocab) == "unit-tests"


def test_canonical_keeps_an_existing_name_exactly() -> None:
    vocab = TagVocabulary(counts={"news": 2, "new": 9})
    assert tag_canonical("News", vocab) == "news"


def test_canonical_is_empty_for_stop_words() -> None:
    assert tag_canonical("the", TagVocabulary(counts={"the-who": 1})) == ""


def test_canon_learns_names_added_mid_batch() -> None:
    canon = TagCanon(TagVocabulary())
    assert "terraform-module" not in canon
    canon.add("terraform-module")
    assert "terraform-module" in canon
    assert canon.canonical("Terraform modules") == "terraform-module"


def test_alias_suggestions_pair_near_spellings_rarer_first() -> None:
    vocab = TagVocabulary(counts={"colour": 2, "color": 7, "postgresql": 1, "postgres": 9})
    assert alias_suggestions(vocab) == [
        ("colour", "color", 0.909),
        ("postgresql", "postgres", 0.889),
    ]


def test_alias_suggestions_point_unfolded_names_at_folded_ones() -> None:
    vocab = TagVocabulary(counts={"databases": 9, "database": 2, "e-mail": 1, "email": 4})
    assert alias_suggestions(vocab) == [("databases", "database", 1.0), ("e-mail", "email", 0.98)]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("sync", "async"),
        ("encryption", "decryption"),
        ("python-2", "python-3"),
        ("min-price", "max-price"),
        ("data-encryption", "data-decryption"),
        ("react", "redux"),
    ],
)
def test_alias_suggestions_skip_look_alikes_that_differ_in_meaning(a: str, b: str) -> None:
    assert alias_suggestions(TagVocabulary(counts={a: 3, b: 4})) == []


def test_alias_suggestions_fold_a_rare_generic_compound_into_its_base() -> None:
    vocab = TagVocabulary(counts={"postgres": 30, "postgres-setup": 1, "database": 30})
    assert alias_suggestions(vocab) == [("postgres-setup", "postgres", 0.9)]


def test_alias_suggestions_offer_specific_compounds_only_below_the_default_threshold() -> None:
    vocab = TagVocabulary(counts={"database": 30, "database-migration": 1})
    assert alias_suggestions(vocab) == []
    assert alias_suggestions(vocab, threshold=0.7) == [("database-migration", "database", 0.7)]


def test_alias_suggestions_ignore_compounds_that_are_not_rare() -> None:
    vocab = TagVocabulary(counts={"postgres": 30, "postgres-setup": 8})
    assert alias_suggestions(vocab, threshold=0.6) == []


def test_tags_to_split_needs_both_share_and_count() -> None:
    vocab = TagVocabulary(counts={"database": 40, "python": 25, "cooking": 19, "misc": 3})
    assert tags_to_split(vocab, total_turns=60) == ["database", "python"]
    assert tags_to_split(vocab, total_turns=200) == []
    assert tags_to_split(vocab, total_turns=50, min_turns=30) == ["database"]
    assert tags_to_split(vocab, total_turns=0) == []


def _database_turns() -> list[TurnView]:
    texts = [
        ("The database migration failed on the orders table.", ["database"]),
        ("Roll back and rerun it.", ["database", "migration"]),
        ("Write a migration that adds a column to orders.", ["database"]),
        ("Is the migration safe to run twice?", ["database"]),
        ("Add an index on email to speed up lookups.", ["database"]),
        ("The index is bloated; rebuild the index.", ["database"]),
        ("Which index type suits range queries?", ["database"]),
        ("The database looks fine today.", ["database"]),
        ("Unrelated: I like cats.", ["cat"]),
    ]
    return [
        TurnView(position=i, role="user", text=t, tags=tags) for i, (t, tags) in enumerate(texts)
    ]


def test_split_plan_gives_each_turn_a_more_specific_tag() -> None:
    vocab = TagVocabulary(counts={"database": 8, "migration": 1, "cat": 1})
    plan = tag_split_plan("database", _database_turns(), vocab)
    assert {pos: plan[pos] for pos in (0, 1, 2, 3)} == dict.fromkeys(
        (0, 1, 2, 3), "database-migration"
    )
    assert {pos: plan[pos] for pos in (4, 5, 6)} == dict.fromkeys((4, 5, 6), "database-index")
    assert 8 not in plan  # not a database turn


def test_split_plan_puts_turns_without_a_distinctive_keyphrase_in_the_largest_group() -> None:
    vocab = TagVocabulary(counts={"database": 8})
    plan = tag_split_plan("database", _database_turns(), vocab)
    assert plan[7] == "database-migration"
    assert tag_split_alias(plan) == "database-migration"


def test_split_plan_is_empty_when_the_tag_is_uniform() -> None:
    turns = [
        TurnView(position=i, role="user", text=f"tell me about the database {i}", tags=["database"])
        for i in range(6)
    ]
    assert tag_split_plan("database", turns, TagVocabulary(counts={"database": 6})) == {}
    assert tag_split_alias({}) == ""
