"""Planning benchmark (issue 5): what planning one request costs on a
500-turn conversation, the history stored and processed first (as the
ingestion benchmark does), then the client's whole history plus a new message
planned ``runs`` times with different questions. Prints the first (cold: the
retrieval index is built) and the warm p50/p95 in milliseconds, planning and
rendering the upstream body, and what the plan kept.

Runs against the configured database in a throwaway account that it deletes
afterwards. The embedder is the configured one (``VC_EMBEDDER``).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import orjson
from django.contrib.auth import get_user_model

from memory_app.bench.ingest import SUBJECTS, _history, _run
from memory_app.services.planning import payload_plan_for_request
from proxy_app.formats import ADAPTERS
from proxy_app.formats.recall import planned_body
from vcloud.accounts.services import account_for_user


def run(turns: int = 500, ceiling: int = 16_000, runs: int = 30) -> dict[str, Any]:
    user = get_user_model().objects.create_user(f"vc-bench-{uuid.uuid4().hex[:8]}")
    try:
        ingest = _run(user, turns, ceiling)
        return {"ingest": ingest, **_plan(user, turns, ceiling, runs)}
    finally:
        user.delete()


def _plan(user: Any, turns: int, ceiling: int, runs: int) -> dict[str, Any]:
    account = account_for_user(user)
    conversation = account.conversations.get()
    history = [{"role": r, "content": t} for r, t in _history(turns)]
    adapter = ADAPTERS["anthropic"]
    plan_ms: list[float] = []
    render_ms: list[float] = []
    plan: Any = None
    for n in range(runs):
        subject, things = SUBJECTS[n % len(SUBJECTS)]
        question = f"What did we decide about the {things[n % len(things)]} for the {subject}?"
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100}
        body["messages"] = [*history, {"role": "user", "content": question}]
        exchange = adapter.parse_request(orjson.loads(orjson.dumps(body)))
        t0 = time.perf_counter()
        plan = payload_plan_for_request(
            account_id=account.pk,
            conversation_id=conversation.pk,
            exchange=exchange,
            ceiling=ceiling,
            cache_aware=True,
        )
        t1 = time.perf_counter()
        orjson.dumps(planned_body(adapter, exchange, plan))
        t2 = time.perf_counter()
        plan_ms.append((t1 - t0) * 1000)
        render_ms.append((t2 - t1) * 1000)
    warm = sorted(plan_ms[1:]) or plan_ms
    return {
        "runs": runs,
        "plan_cold_ms": round(plan_ms[0], 1),
        "plan_warm_p50_ms": round(statistics.median(warm), 1),
        "plan_warm_p95_ms": round(warm[min(len(warm) - 1, int(0.95 * len(warm)))], 1),
        "render_p50_ms": round(statistics.median(render_ms), 2),
        "last_plan": {
            "passthrough": plan.passthrough,
            "parts": plan.report.get("parts", {}),
            "recalled": len(plan.recalled),
            "kept_turns": len(plan.kept_positions),
        },
    }
