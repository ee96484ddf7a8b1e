"""The engine-only LongMemEval tuning tool: two dev questions go through the
engine with the hashing embedder and come back scored by ``evidence.py``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from memory_app.bench import engine_lme, longmemeval

pytestmark = pytest.mark.skipif(
    not longmemeval.split_path("dev").exists(), reason="LongMemEval dev split not available"
)


def test_main_scores_two_questions_per_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VC_EMBED_CACHE_DIR", str(tmp_path))
    out = io.StringIO()
    argv = ["--limit", "2", "--ceilings", "4000,16000", "--embedder", "hashing", "--quiet"]
    rows = engine_lme.main(argv, out)
    # The second run reads each question's compacted memory from the cache.
    assert len(list((tmp_path / "engine_lme").glob("*.pkl"))) == 2
    again = engine_lme.main(argv, io.StringIO())
    assert [r.get("hit") for r in again[4000]] == [r.get("hit") for r in rows[4000]]
    assert sorted(rows) == [4000, 16000]
    for ceiling, ceiling_rows in rows.items():
        assert len(ceiling_rows) == 2
        for row in ceiling_rows:
            # the fields evidence.score_payload fills in
            assert {"question_id", "question_type", "scored", "payload_chars"} <= set(row)
            if row["scored"]:
                assert isinstance(row["hit"], bool)
                assert 0.0 <= row["mean_coverage"] <= 1.0
            assert 0 < row["payload_tokens"] <= ceiling
    summary = longmemeval.evidence().summarise(rows[16000])
    assert summary["questions"] == 2
    text = out.getvalue()
    assert "not the official benchmark" in text
    assert "mean payload tokens" in text
    assert "mean window tokens" in text


def test_signals_are_validated() -> None:
    with pytest.raises(SystemExit):
        engine_lme.main(["--limit", "1", "--signals", "bogus"], io.StringIO())
