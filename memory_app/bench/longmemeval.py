"""LongMemEval through the real request path: does the evidence reach the model?

Contract
--------
``run()`` starts one vcloud server process (uvicorn, a fresh ``VC_DATA_DIR``
with its own migrated SQLite database, embedded mode) whose Anthropic upstream
is the fake provider of ``tests.fakes.provider``, served in this process so
that the body it received can be read back. For every (question, ceiling) it
uses a fresh account (``context_ceiling`` = the ceiling) and vckey, and one
conversation (``X-VC-Session: lme-<question_id>``):

1. request 1 sends the whole haystack — sessions in order, each a run of
   alternating user/assistant messages (empty turns dropped, consecutive
   same-role turns merged), the session date as a header line
   ``[2023/05/20 (Sat) 02:21]`` at the start of each session's first user
   message;
2. the memory API is polled until the stored turns are there and
   ``pending_jobs`` is 0 (the processing time of the row; a timeout is
   reported, not fatal);
3. request 2 sends the haystack plus ``[question_date] question`` with
   ``X-VC-Context-Ceiling``; the body the fake provider received for it is
   turned into text (system + the text of every message) and scored by the
   benchmark's own ``evidence.py`` — imported, never re-implemented.

Rows are ``evidence.score_payload`` rows plus the ceiling, payload and history
tokens (``memory_app.engine.tokens.count_text``), processing seconds and the
state of the last memory job. ``--limit`` takes questions round-robin over the
question types in file order, so a short run still covers every type.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from memory_app.engine.tokens import count_text, tokenizer_status

ROOT = Path(__file__).resolve().parents[2]
LONGMEMEVAL_DIR = Path(os.environ.get("VC_LONGMEMEVAL_DIR", "/work/shared/benchmarks/longmemeval"))
DEFAULT_CACHE_DIR = ROOT / "var" / "bench-cache"
DEFAULT_CEILINGS = (16_000,)
MODEL = "claude-sonnet-4-5"
HEADERS = {
    "content-type": "application/json",
    "x-api-key": "sk-bench",
    "anthropic-version": "2023-06-01",
}
SETTLED_STATES = ("done", "failed")
POLL_S = 0.25

Message = dict[str, Any]
Progress = Callable[[str], None]


class NothingSelected(ValueError):
    """The split, types and ceilings given select no run."""


def evidence() -> ModuleType:
    """The benchmark's ``evidence.py``, loaded from the benchmark directory."""
    module = sys.modules.get("evidence")
    if module is None:
        spec = importlib.util.spec_from_file_location("evidence", LONGMEMEVAL_DIR / "evidence.py")
        if spec is None or spec.loader is None:
            raise FileNotFoundError(LONGMEMEVAL_DIR / "evidence.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["evidence"] = module
        spec.loader.exec_module(module)
    return module


def split_path(split: str) -> Path:
    return LONGMEMEVAL_DIR / f"{split}.jsonl.gz" if split == "dev" else Path(split)


def questions_select(
    questions: Iterable[dict[str, Any]], *, types: Iterable[str] = (), limit: int | None = None
) -> list[dict[str, Any]]:
    """The questions of ``types`` (all if empty), round-robin over types up to ``limit``."""
    wanted = set(types)
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        if not wanted or q["question_type"] in wanted:
            by_type[q["question_type"]].append(q)
    groups = list(by_type.values())
    out = [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
    return out if limit is None else out[:limit]


# ------------------------------------------------------------------ messages


def history_messages(question: dict[str, Any]) -> list[Message]:
    """The haystack as Anthropic messages, the session date on each session's
    first user message."""
    messages: list[Message] = []
    for date, session in zip(
        question["haystack_dates"], question["haystack_sessions"], strict=True
    ):
        dated = False
        for turn in session:
            text = turn["content"]
            if not text.strip():
                continue
            if turn["role"] == "user" and not dated:
                text, dated = f"[{date}]\n{text}", True
            _append(messages, turn["role"], text)
    return messages


def _append(messages: list[Message], role: str, text: str) -> None:
    # Merged, not dropped: every turn's text must still reach the proxy.
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"] += "\n\n" + text
    else:
        messages.append({"role": role, "content": text})


def question_message(question: dict[str, Any]) -> Message:
    return {"role": "user", "content": f"[{question['question_date']}] {question['question']}"}


def payload_text(body: dict[str, Any]) -> str:
    """Everything an Anthropic request puts in front of the model, as text."""
    parts = [_text(body.get("system"))]
    parts += [_text(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict)]
    return "\n\n".join(p for p in parts if p)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "content" in block:  # tool_result
            texts.append(_text(block["content"]))
        elif "input" in block:  # tool_use
            texts.append(json.dumps(block["input"]))
    return "\n\n".join(t for t in texts if t)


# ------------------------------------------------------------------ the run


@dataclass
class Rig:
    """The server, the fake upstream and an HTTP client to reach them."""

    server: Any  # tests.support.server.Server
    upstream: Any  # tests.fakes.provider.RunningFake
    client: httpx.Client
    timeout: float

    def post(self, key: str, messages: list[Message], session: str, ceiling: int | None) -> str:
        """Send one request; the conversation id the proxy answered with."""
        headers = {**HEADERS, "x-vc-session": session}
        if ceiling is not None:
            headers["x-vc-context-ceiling"] = str(ceiling)
        body = {"model": MODEL, "max_tokens": 64, "messages": messages}
        response = self.client.post(f"/v/{key}/v1/messages", json=body, headers=headers)
        response.raise_for_status()
        return response.headers["x-vc-conversation"]

    def settle(self, key: str, conversation: str, turns: int) -> dict[str, Any]:
        """The conversation once ``turns`` are stored and its jobs have finished;
        ``settled`` is False if that did not happen within the timeout."""
        deadline = time.monotonic() + self.timeout
        auth = {"authorization": f"Bearer {key}"}
        while True:
            detail = self.client.get(f"/api/v1/conversations/{conversation}", headers=auth)
            detail.raise_for_status()
            d = detail.json()
            jobs = d["jobs"]
            done = d["turns"] >= turns and d["pending_jobs"] == 0 and bool(jobs)
            if done and all(j["state"] in SETTLED_STATES for j in jobs):
                return {"settled": True, "job_state": jobs[0]["state"]}
            if time.monotonic() > deadline:
                return {"settled": False, "job_state": jobs[0]["state"] if jobs else "none"}
            time.sleep(POLL_S)

    def context(self, key: str, conversation: str, requests: int) -> dict[str, Any]:
        """The context record of the conversation's newest request ({} if it has
        none), once ``requests`` requests are logged."""
        auth = {"authorization": f"Bearer {key}"}
        base = f"/api/v1/conversations/{conversation}/requests"
        deadline = time.monotonic() + 10
        while True:
            logged = self.client.get(base, headers=auth).json()
            if len(logged) >= requests or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        if not logged:
            return {}
        found = self.client.get(f"{base}/{logged[0]['request_id']}/context", headers=auth)
        return found.json() if found.status_code == 200 else {}

    def upstream_body(self) -> dict[str, Any]:
        sent = [r for r in self.upstream.fake.requests if r.path.endswith("/v1/messages")]
        if not sent:
            raise RuntimeError("the fake provider received no request")
        return dict(sent[-1].json)


def question_run(rig: Rig, key: str, question: dict[str, Any], ceiling: int) -> dict[str, Any]:
    """One question at one ceiling: the evidence row with its figures."""
    history = history_messages(question)
    session = f"lme-{question['question_id']}"
    started = time.perf_counter()
    conversation = rig.post(key, history, session, None)
    state = rig.settle(key, conversation, len(history))
    processing_s = time.perf_counter() - started
    rig.upstream.fake.requests.clear()
    rig.post(key, [*history, question_message(question)], session, ceiling)
    text = payload_text(rig.upstream_body())
    rig.upstream.fake.requests.clear()
    report = rig.context(key, conversation, requests=2).get("report", {})
    row: dict[str, Any] = evidence().score_payload(question, text)
    payload_tokens = count_text(text)
    return row | {
        "ceiling": ceiling,
        "payload_tokens": payload_tokens,
        "history_tokens": count_text(payload_text({"messages": history})),
        "over_ceiling": payload_tokens > ceiling,
        "processing_s": round(processing_s, 2),
        "conversation_id": int(conversation),
        "parts": report.get("parts", {}),
        "reasons": report.get("reasons", []),
        **state,
    }


def run(
    *,
    split: str = "dev",
    ceilings: Iterable[int] = DEFAULT_CEILINGS,
    limit: int | None = None,
    types: Iterable[str] = (),
    embedder: str = "minilm",
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    timeout: float = 600,
    layout: str = "stable",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every selected question at every ceiling; rows and per-ceiling figures.
    ``layout`` "rewrite" turns the accounts' cache-aware layout off (the recall
    then goes in the system block, with all the room: issue 12's comparison)."""
    ceilings = list(ceilings)
    path = split_path(split)
    questions = questions_select(evidence().load_questions(str(path)), types=types, limit=limit)
    if not questions or not ceilings:
        raise NothingSelected(f"no questions of the selected types in {path}, or no ceiling")
    rows: list[dict[str, Any]] = []
    with _rig(embedder, cache_dir, timeout) as rig:
        specs = [(_user(q, c), c) for q in questions for c in ceilings]
        keys = _accounts_create(rig.server, [*specs, ("lme-warmup", ceilings[0])])
        if layout == "rewrite":
            layout_off(rig.server, [user for user, _ in specs])
        warm_up_s = _warm_up(rig, keys["lme-warmup"])
        for n, (q, c) in enumerate((q, c) for q in questions for c in ceilings):
            row = question_run(rig, keys[_user(q, c)], q, c)
            rows.append(row)
            if progress:
                progress(_progress_line(n + 1, len(specs), row))
    return {
        "split": str(path),
        "embedder": embedder,
        "layout": layout,
        "tokenizer": tokenizer_status(),
        "warm_up_s": round(warm_up_s, 2),
        "ceilings": {
            str(c): ceiling_figures([r for r in rows if r["ceiling"] == c]) for c in ceilings
        },
        "rows": rows,
    }


def _user(question: dict[str, Any], ceiling: int) -> str:
    return f"lme-{question['question_id']}-{ceiling}"


@contextmanager
def _rig(embedder: str, cache_dir: Path | None, timeout: float) -> Iterator[Rig]:
    """The fake upstream and the server, stopped and cleaned up after."""
    from tests.fakes.provider import start_fake_provider
    from tests.support.server import start_server

    env = {
        "VC_EMBEDDER": embedder,
        "VC_EMBED_CACHE_DIR": str(cache_dir) if cache_dir else "",
        "DATABASE_URL": "",  # embedded mode: its own SQLite file, jobs in-process
        "REDIS_URL": "",
        "LOG_LEVEL": "WARNING",
    }
    tmp = Path(tempfile.mkdtemp(prefix="vc-lme-"))
    try:
        with start_fake_provider() as upstream:
            server = start_server(tmp, VC_UPSTREAM_ANTHROPIC=upstream.url, **env)
            client = httpx.Client(base_url=server.url, timeout=httpx.Timeout(120))
            try:
                yield Rig(server, upstream, client, timeout)
            finally:
                client.close()
                server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_ACCOUNTS_SCRIPT = """
import json
from django.contrib.auth import get_user_model
from vcloud.accounts.services import account_for_user, vckey_create
keys = {}
for name, ceiling in json.loads(%r):
    account = account_for_user(get_user_model().objects.create_user(name))
    account.context_ceiling = ceiling
    account.save(update_fields=["context_ceiling"])
    keys[name] = vckey_create(account=account, name="longmemeval")[1]
print(json.dumps(keys))
"""


_LAYOUT_OFF_SCRIPT = """
import json
from vcloud.accounts.models import Account
Account.objects.filter(owner__username__in=json.loads(%r)).update(cache_aware_layout=False)
"""


def layout_off(server: Any, usernames: list[str]) -> None:
    """Turn the cache-aware layout off for these users' accounts (the "rewrite" layout)."""
    server.manage("shell", "-c", _LAYOUT_OFF_SCRIPT % json.dumps(usernames))


def _accounts_create(server: Any, specs: list[tuple[str, int]]) -> dict[str, str]:
    """One account per (user name, ceiling) in the server's database; raw vckeys."""
    out = server.manage("shell", "-c", _ACCOUNTS_SCRIPT % json.dumps(specs))
    return dict(json.loads(out.strip().splitlines()[-1]))


def _warm_up(rig: Rig, key: str) -> float:
    """Load the embedder in the process that runs the jobs, outside the timings."""
    started = time.perf_counter()
    history = [
        {"role": "user", "content": "[2023/05/20 (Sat) 02:21]\nI repotted the basil today."},
        {"role": "assistant", "content": "Nice, basil likes a sunny window."},
    ]
    conversation = rig.post(key, history, "lme-warmup", None)
    rig.settle(key, conversation, len(history))
    rig.upstream.fake.requests.clear()
    return time.perf_counter() - started


def _progress_line(n: int, total: int, row: dict[str, Any]) -> str:
    hit = "-" if not row["scored"] else ("hit" if row["hit"] else "MISS")
    settled = "" if row["settled"] else "  TIMEOUT"
    return (
        f"[{n}/{total}] @{row['ceiling']} {row['question_id']} {row['question_type']}: {hit}"
        f"  payload {row['payload_tokens']:,} / history {row['history_tokens']:,} tokens"
        f"  processing {row['processing_s']:.1f} s{settled}"
    )


# ------------------------------------------------------------------ figures


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def ceiling_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``evidence.summarise`` of one ceiling's rows, with the size and time figures."""
    by_type: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["scored"]:
            by_type[r["question_type"]] += 1
    return {
        "evidence": evidence().summarise(rows),
        "scored_by_type": dict(sorted(by_type.items())),
        "payload_tokens_mean": round(_mean(r["payload_tokens"] for r in rows)),
        "history_tokens_mean": round(_mean(r["history_tokens"] for r in rows)),
        "payload_to_history_tokens": round(
            _mean(r["payload_tokens"] / r["history_tokens"] for r in rows if r["history_tokens"]),
            4,
        ),
        "over_ceiling_share": round(_mean(float(r["over_ceiling"]) for r in rows), 4),
        "over_ceiling": sum(r["over_ceiling"] for r in rows),
        "payload_to_ceiling": round(_mean(r["payload_tokens"] / r["ceiling"] for r in rows), 2),
        "processing_s_mean": round(_mean(r["processing_s"] for r in rows), 2),
        "parts_mean": {
            part: round(_mean(r.get("parts", {}).get(part, 0) for r in rows))
            for part in ("fixed", "stable", "window", "recall", "headroom")
        },
        "unsettled": sum(not r["settled"] for r in rows),
        "jobs_failed": sum(r["job_state"] == "failed" for r in rows),
    }


def report(result: dict[str, Any]) -> str:
    """The summaries as JSON lines, then the tables."""
    ceilings = result["ceilings"]
    lines = [f"evidence.summarise @{c}: {json.dumps(f['evidence'])}" for c, f in ceilings.items()]
    lines += ["", *_table_by_ceiling(result), "", *_table_by_type(ceilings)]
    return "\n".join(lines)


def _table_by_ceiling(result: dict[str, Any]) -> Iterator[str]:
    any_f = next(iter(result["ceilings"].values()))
    yield (
        f"LongMemEval {result['split']}: {any_f['evidence']['questions']} questions"
        f" ({any_f['evidence']['scored']} scored), embedder {result['embedder']},"
        f" layout {result.get('layout', 'stable')},"
        f" tokens {result['tokenizer']}, warm-up {result['warm_up_s']} s"
    )
    head = ["ceiling", "hit rate", "sess. recall", "payload tok", "history tok"]
    head += ["payload/hist", "over ceiling", "process s", "timeouts", "jobs failed"]
    yield "  ".join(f"{h:>12}" for h in head)
    for c, f in result["ceilings"].items():
        e = f["evidence"]
        cells = [c, f"{e['hit_rate']:.1%}", f"{e['session_recall']:.1%}"]
        cells += [f"{f['payload_tokens_mean']:,}", f"{f['history_tokens_mean']:,}"]
        cells += [f"{f['payload_to_history_tokens']:.3f}", f"{f['over_ceiling_share']:.0%}"]
        cells += [f"{f['processing_s_mean']:.1f}", str(f["unsettled"]), str(f["jobs_failed"])]
        yield "  ".join(f"{cell:>12}" for cell in cells)
    for c, f in result["ceilings"].items():
        parts = ", ".join(f"{k} {v:,}" for k, v in f["parts_mean"].items())
        yield f"  @{c} mean tokens per part of the planned payload: {parts}"
    for c, f in result["ceilings"].items():
        if f["over_ceiling"]:
            n = f["evidence"]["questions"]
            yield (
                f"  !! @{c}: {f['over_ceiling']} of {n} payloads over the ceiling,"
                f" {f['payload_to_ceiling']:.2f}x the ceiling on average"
            )


def _table_by_type(ceilings: dict[str, dict[str, Any]]) -> Iterator[str]:
    types = sorted({t for f in ceilings.values() for t in f["scored_by_type"]})
    yield "hit rate by question type:"
    yield f"{'type':<28}{'n':>4}" + "".join(f"{'@' + c:>10}" for c in ceilings)
    for t in types:
        n = max(f["scored_by_type"].get(t, 0) for f in ceilings.values())
        rates = "".join(f"{f['evidence']['by_type'].get(t, 0):>10.1%}" for f in ceilings.values())
        yield f"{t:<28}{n:>4}" + rates
