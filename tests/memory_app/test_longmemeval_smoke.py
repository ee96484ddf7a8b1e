"""The LongMemEval harness: its messages lose nothing, and two questions of the
dev split go through a real server and are scored by the benchmark's own
``evidence.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory_app.bench import longmemeval

pytestmark = pytest.mark.skipif(
    not longmemeval.split_path("dev").exists(), reason="LongMemEval dev split not available"
)


def _questions(limit: int) -> list[dict[str, Any]]:
    questions = longmemeval.evidence().load_questions(str(longmemeval.split_path("dev")))
    return longmemeval.questions_select(questions, limit=limit)


def test_limit_takes_questions_round_robin_over_types() -> None:
    questions = _questions(limit=6)
    assert len({q["question_type"] for q in questions}) == 6


def test_history_alternates_roles_and_dates_each_session() -> None:
    for question in _questions(limit=6):
        messages = longmemeval.history_messages(question)
        roles = [m["role"] for m in messages]
        assert all(a != b for a, b in zip(roles, roles[1:], strict=False))
        text = longmemeval.payload_text({"messages": messages})
        dated = sum(any(t["role"] == "user" for t in s) for s in question["haystack_sessions"])
        headers = {f"[{d}]\n" for d in question["haystack_dates"]}
        assert sum(text.count(h) for h in headers) == dated
        # The whole haystack is there: unmodified, it is a hit for evidence.py.
        row = longmemeval.evidence().score_payload(question, text)
        assert row.get("hit", True)


def test_two_dev_questions_are_scored_through_a_real_server(tmp_path: Path) -> None:
    evidence = longmemeval.evidence()
    questions = {q["question_id"]: q for q in _questions(limit=2)}

    result = longmemeval.run(
        split="dev",
        ceilings=[16_000],
        limit=2,
        embedder="hashing",
        cache_dir=tmp_path / "cache",
        timeout=120,
    )

    rows = result["rows"]
    assert [r["question_id"] for r in rows] == list(questions)
    for row in rows:
        evidence_keys = evidence.score_payload(questions[row["question_id"]], "").keys()
        assert evidence_keys <= row.keys()
        assert isinstance(row["hit"], bool)
        assert row["ceiling"] == 16_000
        assert row["payload_tokens"] > 0
        assert row["history_tokens"] > 0
        assert row["over_ceiling"] == (row["payload_tokens"] > 16_000)
        assert row["settled"]
        assert row["job_state"] == "done"
    figures = result["ceilings"]["16000"]
    assert figures["evidence"] == evidence.summarise(rows)
    assert "16000" in longmemeval.report(result)
    assert (tmp_path / "cache" / "embeddings.sqlite3").exists()
