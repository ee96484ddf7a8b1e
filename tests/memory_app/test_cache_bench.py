"""The prompt-cache billing benchmark: a short replay through a real server, and
the pieces that decide what it replays and how it reads the upstream bodies."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from memory_app.bench import cache, longmemeval

pytestmark = pytest.mark.skipif(
    not longmemeval.split_path("dev").exists()
    or not (cache.CACHE_BENCH_DIR / "billing.py").exists(),
    reason="LongMemEval dev split or the cache benchmark's billing.py not available",
)


def test_the_conversation_is_the_longest_haystack_replayed_one_user_turn_at_a_time() -> None:
    question = cache.conversation_question()
    history = longmemeval.history_messages(question)
    requests = list(cache.requests_of(history))

    assert cache.user_turns(question) == len(requests) == 288
    assert [len(r) for r in requests[:3]] == [1, 3, 5]
    assert all(r[-1]["role"] == "user" for r in requests)
    assert requests[-1] == history[:-1]  # the client never sends the model's last reply
    assert len(list(cache.requests_of(cache._history_cut(history, 12)))) == 12


def test_where_the_next_body_first_differs_from_the_previous_one() -> None:
    def body(*texts: str, system: str | None = None) -> dict[str, Any]:
        roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(texts))]
        out: dict[str, Any] = {
            "messages": [{"role": r, "content": t} for r, t in zip(roles, texts, strict=True)]
        }
        return out | ({"system": system} if system else {})

    grown = body("a", "b", "c")
    assert cache.prefix_break(body("a"), grown) == "prefix"
    assert cache.prefix_break(body("a", "b", "x"), body("a", "b", "y", "z", "w")) == "tail"
    assert cache.prefix_break(body("a", "b", "c"), body("x", "b", "c", "d", "e")) == "history"
    assert cache.prefix_break(body("a", system="s1"), body("a", "b", "c", system="s2")) == (
        "tools/system"
    )


def test_a_short_replay_prints_both_summaries_for_both_layouts(tmp_path: Path) -> None:
    out = StringIO()
    call_command(
        "vc_bench",
        "cache",
        *("--turns", "6", "--max-turns", "12", "--ceiling", "2000", "--wait", "2"),
        *("--layout", "both", "--embedder", "hashing", "--cache-dir", str(tmp_path / "emb")),
        "--json",
        stdout=out,
        stderr=StringIO(),
    )
    result = json.loads(out.getvalue())

    assert (result["turns"], result["replayed_turns"], result["user_turns"]) == (6, 12, 288)
    assert set(result["layouts"]) == {"stable", "rewrite"}
    for figures in result["layouts"].values():
        summaries = figures["summaries"]
        assert set(summaries) == {"6", "12"}
        for span, summary in summaries.items():
            assert summary["direct"]["requests"] == summary["proxied"]["requests"] == int(span)
            for side in ("direct", "proxied"):
                assert 0 < summary[side]["billed_tokens"] <= summary[side]["raw_tokens"]
        # Over a 2,000-token ceiling by turn 12: the proxy sent less than the client.
        assert summaries["12"]["proxied"]["raw_tokens"] < summaries["12"]["direct"]["raw_tokens"]
        assert summaries["12"]["raw_ratio"] < 1
        assert sum(figures["where_prefix_breaks"]["12"].values()) == 11
        assert {"final_request", "question"} <= figures["evidence"].keys()
        assert "scored" in figures["evidence"]["question"]
        assert figures["extra_upstream_calls"] == 0

    printed = cache.report(result)
    for name, figures in result["layouts"].items():
        for span, summary in figures["summaries"].items():
            assert f"billing.summarise [{name}] @{span} turns: {json.dumps(summary)}" in printed
    assert "stable @6" in printed
    assert "rewrite @12" in printed
