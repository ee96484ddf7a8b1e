"""Dashboard benchmark (issue 8): server render time of the overview, sessions
and savings pages for one account holding 1,000,000 request-log rows and
100,000 ledger rows (plus their rollups), with no query per row.

``run()`` never touches the configured database: it starts this module in a
child process (``python -m telemetry_app.bench``) whose ``DATABASE_URL`` points
at a throwaway SQLite file. The child migrates, seeds with raw batched inserts
(``proxy_app.bulk``) and ``rollups_add`` (the writer's own upsert, so seeding
also exercises it), then renders each page with Django's test ``Client``:
a few warm-up requests, then the median of ``runs`` timed ones. Figures go back
to the parent as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "overview": "/dashboard/",
    "sessions": "/dashboard/sessions/",
    "savings": "/dashboard/savings/",
    "telemetry": "/dashboard/telemetry/",
}
TARGET_MS = 300.0
# (model, format, provider) of the seeded conversations.
MODELS = [
    ("claude-sonnet-4-5", "anthropic", "anthropic"),
    ("claude-haiku-4-5", "anthropic", "anthropic"),
    ("gpt-4o", "openai_chat", "openai"),
    ("gemini-2.5-flash", "gemini", "gemini"),
]
OWN_MODEL = "gpt-4o-mini"
SPAN_DAYS = 90
WARMUP = 2


def run(
    *, requests: int = 1_000_000, calls: int = 100_000, sessions: int = 10_000, runs: int = 7
) -> dict[str, Any]:
    """Seed a throwaway database in a child process and time the pages there."""
    tmp = Path(tempfile.mkdtemp(prefix="vc-bench-dashboard-"))
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
        "DJANGO_SETTINGS_MODULE": "vcloud.settings.base",
        "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
        "VC_DATA_DIR": str(tmp),
        "VC_MEMORY_JOBS": "0",
    }
    command = [sys.executable, "-m", "telemetry_app.bench"]
    command += ["--requests", str(requests), "--calls", str(calls)]
    command += ["--sessions", str(sessions), "--runs", str(runs)]
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"the benchmark child failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(f: dict[str, Any]) -> str:
    lines = [
        f"dashboard pages, one account: {f['requests']:,} request-log rows, "
        f"{f['calls']:,} ledger rows, {f['sessions']:,} sessions, "
        f"{f['rollups']:,} + {f['session_rollups']:,} rollup rows "
        f"(seeded in {f['seed_seconds']:.0f} s, SQLite)",
        f"server render time, warm, median of {f['runs']} (Django test Client):",
    ]
    for name, page in f["pages"].items():
        mark = "" if name in ("overview", "sessions", "savings") else "  (not in the target)"
        lines.append(
            f"  {name:<10} {page['median_ms']:>7.1f} ms   min {page['min_ms']:>6.1f}"
            f"   max {page['max_ms']:>6.1f}   {page['queries']} queries{mark}"
        )
    verdict = "met" if f["target_met"] else "MISSED"
    lines.append(f"target ≤ {TARGET_MS:.0f} ms for overview, sessions and savings: {verdict}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the child


def _child(requests: int, calls: int, sessions: int, runs: int) -> dict[str, Any]:
    from django.core.management import call_command

    from telemetry_app.models import Rollup, SessionRollup

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    user = _seed(requests=requests, calls=calls, sessions=sessions)
    seeded = time.perf_counter() - started
    pages = {name: _time_page(user, url, runs) for name, url in PAGES.items()}
    return {
        "requests": requests,
        "calls": calls,
        "sessions": sessions,
        "rollups": Rollup.objects.count(),
        "session_rollups": SessionRollup.objects.count(),
        "seed_seconds": round(seeded, 1),
        "runs": runs,
        "pages": pages,
        "target_met": all(
            pages[name]["median_ms"] <= TARGET_MS for name in ("overview", "sessions", "savings")
        ),
    }


def _time_page(user: Any, url: str, runs: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    for _ in range(WARMUP):
        assert client.get(url).status_code == 200, url
    timings = []
    for _ in range(runs):
        began = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, url
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    return {
        "median_ms": round(statistics.median(timings), 1),
        "min_ms": round(min(timings), 1),
        "max_ms": round(max(timings), 1),
        "queries": len(queries),
    }


def _seed(*, requests: int, calls: int, sessions: int) -> Any:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from vcloud.accounts.services import account_for_user, vckey_create

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=OFF")
    user = get_user_model().objects.create_user("bench", password="bench-password-123")
    account = account_for_user(user)
    keys = [vckey_create(account=account, name=n)[0].pk for n in ("laptop", "ci", "prod")]
    now = timezone.now()
    rng = random.Random(8)
    per_session, own_per_session = max(1, requests // sessions), max(1, calls // sessions)
    batch = max(1, 20_000 // per_session)
    for first in range(0, sessions, batch):
        with transaction.atomic():
            _seed_sessions(
                account.pk, keys, now, rng, range(first, min(first + batch, sessions)), sessions,
                per_session, own_per_session,
            )  # fmt: skip
    return user


def _seed_sessions(
    account_id: int,
    keys: list[int],
    now: Any,
    rng: random.Random,
    numbers: range,
    sessions: int,
    per_session: int,
    own_per_session: int,
) -> None:
    """Conversations spread over ``SPAN_DAYS``, each a burst of requests over
    about three hours, with a few of vcloud's own LLM calls each."""
    from memory_app.models import Conversation, JobState, MemoryJob
    from proxy_app.bulk import bulk_insert
    from telemetry_app.models import LLMCall, RequestLog
    from telemetry_app.rollups import rollups_add

    step = timedelta(days=SPAN_DAYS) / sessions
    conversations, requests, own, jobs = [], [], [], []
    for n in numbers:
        model, fmt, _ = MODELS[n % len(MODELS)]
        began = now - timedelta(days=SPAN_DAYS) + step * n - timedelta(hours=3)
        rows = [
            _request_row(account_id, keys[n % len(keys)], n, i, model, fmt, began, rng)
            for i in range(per_session)
        ]
        requests += rows
        own += [_own_call(account_id, n, i, began, rng) for i in range(own_per_session)]
        conversations.append(_conversation_row(account_id, keys[n % len(keys)], n, rows, fmt))
        if n >= sessions - 30:  # the newest sessions still have background work
            jobs.append({"conversation_id": n + 1, "kind": "process", "state": JobState.PENDING})
    bulk_insert(Conversation, conversations)
    bulk_insert(RequestLog, requests)
    bulk_insert(LLMCall, own)
    if jobs:
        MemoryJob.objects.bulk_create(MemoryJob(**job) for job in jobs)
    rollups_add(requests=requests, calls=own)


def _request_row(
    account_id: int, key_id: int, n: int, i: int, model: str, fmt: str, began: Any, rng: Any
) -> dict[str, Any]:
    from telemetry_app.pricing import call_cost, price_lookup

    price = price_lookup(model)
    client = 600 + 450 * i  # the client resends its whole, growing history
    upstream = min(client, 16_000)
    cached = int(upstream * 0.7)
    output = rng.randint(50, 600)
    return {
        "account_id": account_id,
        "vckey_id": key_id,
        "conversation_id": n + 1,
        "request_id": f"bench-{n}-{i}",
        "format": fmt,
        "path": "/v1/messages",
        "model": model,
        "stream": i % 2 == 0,
        "status": 200 if rng.random() > 0.01 else 529,
        "client_tokens": client,
        "upstream_tokens": upstream,
        "cached_tokens": cached,
        "output_tokens": output,
        "cost": call_cost(
            price, input_tokens=upstream, output_tokens=output, cache_read_tokens=cached
        ),
        "baseline_cost": call_cost(
            price, input_tokens=client, output_tokens=output, cache_read_tokens=cached
        ),
        "overhead_ms": round(rng.uniform(0.3, 4.0), 3),
        "upstream_ms": round(rng.uniform(300, 4000), 3),
        "created_at": began + timedelta(seconds=100 * i + rng.randint(0, 60)),
    }


def _own_call(account_id: int, n: int, i: int, began: Any, rng: Any) -> dict[str, Any]:
    from telemetry_app.pricing import call_cost, price_lookup

    tokens, output = rng.randint(800, 3000), rng.randint(50, 300)
    return {
        "account_id": account_id,
        "conversation_id": n + 1,
        "request_id": "",
        "component": "compactor" if i % 3 == 2 else "tagger",
        "provider": "openai",
        "model": OWN_MODEL,
        "input_tokens": tokens,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": output,
        "cost": call_cost(price_lookup(OWN_MODEL), input_tokens=tokens, output_tokens=output),
        "priced": True,
        "duration_ms": round(rng.uniform(200, 2500), 3),
        "created_at": began + timedelta(seconds=1000 * i + 30),
    }


def _conversation_row(
    account_id: int, key_id: int, n: int, rows: list[dict[str, Any]], fmt: str
) -> dict[str, Any]:
    return {
        "id": n + 1,
        "account_id": account_id,
        "vckey_id": key_id,
        "session_id": f"bench-session-{n}",
        "fingerprint": "",
        "format": fmt,
        "model": rows[-1]["model"],
        "title": f"Bench conversation {n}: planning topic {n % 97}",
        "created_at": rows[0]["created_at"],
        "updated_at": rows[-1]["created_at"],
        "turn_count": 2 * len(rows),
        "request_count": len(rows),
        "client_tokens": sum(r["client_tokens"] for r in rows),
        "upstream_tokens": sum(r["upstream_tokens"] for r in rows),
        "watermark": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    import django

    django.setup()
    figures = _child(args.requests, args.calls, args.sessions, args.runs)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
