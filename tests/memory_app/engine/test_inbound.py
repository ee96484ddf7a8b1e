from __future__ import annotations

import numpy as np
import pytest

from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.inbound import InboundTagger, message_phrases, tag_text, vocab_matrix_build

NAMES = ["postgres", "database", "database-migration", "cooking", "travel", "lisbon", "budget"]
EMBEDDER = HashingEmbedder()


@pytest.fixture(scope="module")
def matrix() -> np.ndarray:
    return vocab_matrix_build(NAMES, EMBEDDER)


def test_returns_only_existing_tags(matrix: np.ndarray) -> None:
    tags = InboundTagger().tags_for(
        "kubernetes ingress on the database cluster", NAMES, matrix, EMBEDDER, k=10, threshold=0.0
    )
    assert tags
    assert {name for name, _ in tags} <= set(NAMES)
    assert "kubernetes" not in dict(tags)


def test_lexical_match_is_found_through_plural_folding(matrix: np.ndarray) -> None:
    tags = InboundTagger().tags_for("my databases are slow", NAMES, matrix, EMBEDDER)
    assert tags[0][0] == "database"


def test_lexical_match_boosts_the_cosine(matrix: np.ndarray) -> None:
    tagger = InboundTagger(lexical_boost=0.25)
    message = "the database migration failed again"
    cosine = float(matrix[NAMES.index("database-migration")] @ EMBEDDER.encode([message])[0])
    tags = dict(tagger.tags_for(message, NAMES, matrix, EMBEDDER))
    assert tags["database-migration"] == pytest.approx(cosine + 0.25)
    assert next(iter(tags)) == "database-migration"


def test_unrelated_message_gets_no_tags(matrix: np.ndarray) -> None:
    assert InboundTagger().tags_for("quarterly tax filing deadline", NAMES, matrix, EMBEDDER) == []


def test_at_most_k_tags_best_first(matrix: np.ndarray) -> None:
    message = "budget for a Lisbon trip, cooking at the database"
    tags = InboundTagger().tags_for(message, NAMES, matrix, EMBEDDER, k=2)
    assert len(tags) == 2
    assert tags[0][1] >= tags[1][1]


def test_empty_vocabulary_or_message_gives_nothing(matrix: np.ndarray) -> None:
    empty = vocab_matrix_build([], EMBEDDER)
    assert empty.shape == (0, EMBEDDER.dimensions)
    assert InboundTagger().tags_for("postgres", [], empty, EMBEDDER) == []
    assert InboundTagger().tags_for("   ", NAMES, matrix, EMBEDDER) == []


def test_matrix_must_match_the_names(matrix: np.ndarray) -> None:
    with pytest.raises(ValueError, match="rows"):
        InboundTagger().tags_for("postgres", NAMES[:-1], matrix, EMBEDDER)


def test_descriptions_are_embedded_with_the_name() -> None:
    assert tag_text("database-migration") == "database migration"
    assert tag_text("cooking", "pasta, baking") == "cooking: pasta, baking"
    plain = vocab_matrix_build(["cooking"], EMBEDDER)
    described = vocab_matrix_build(["cooking"], EMBEDDER, {"cooking": "pasta recipes"})
    assert not np.allclose(plain, described)
    tags = InboundTagger().tags_for("a pasta recipes question", ["cooking"], described, EMBEDDER)
    assert [name for name, _ in tags] == ["cooking"]


def test_message_phrases_are_folded_hyphenated_runs() -> None:
    phrases = message_phrases("Database Migrations failed", max_words=2)
    assert {"database", "migration", "database-migration", "migration-failed"} <= phrases
    assert "database-migration-failed" not in phrases


class _Refusing:
    """An embedder that must not be called: the caller passed the vector."""

    dimensions = EMBEDDER.dimensions
    model_name = "refusing"

    def encode(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("encode called although the vector was given")


def test_a_vector_the_caller_already_has_is_used_instead_of_encoding(matrix: np.ndarray) -> None:
    message = "the database migration failed again"
    vector = EMBEDDER.encode([message])[0]
    given = InboundTagger().tags_for(message, NAMES, matrix, _Refusing(), vector=vector)
    assert given == InboundTagger().tags_for(message, NAMES, matrix, EMBEDDER)
