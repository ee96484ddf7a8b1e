"""The planning benchmark runs end to end on a small conversation (its figures
are printed by ``vc_bench plan``; no test asserts on time)."""

from __future__ import annotations

import pytest

from memory_app.bench import plan
from memory_app.models import Conversation

pytestmark = pytest.mark.django_db(transaction=True)


def test_plan_bench_plans_a_processed_conversation_and_cleans_up() -> None:
    figures = plan.run(turns=60, ceiling=4_000, runs=3)
    assert figures["ingest"]["ok"]
    assert figures["runs"] == 3
    last = figures["last_plan"]
    assert last["passthrough"] is False  # compacted and over the ceiling: planned
    assert last["recalled"] > 0
    assert sum(last["parts"].values()) == 4_000
    assert {"plan_cold_ms", "plan_warm_p50_ms", "plan_warm_p95_ms"} <= set(figures)
    assert not Conversation.objects.exists()  # the throwaway account is gone
