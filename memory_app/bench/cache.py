"""Prompt-cache billing through the real request path (issue 12).

Contract
--------
``run()`` replays one conversation as a client that always resends its whole
history would, through a real vcloud server and the fake provider
(``longmemeval._rig``: a fresh SQLite database, embedded mode), and compares
what the provider would bill with prompt caching, by the shared
``../shared/benchmarks/cache/billing.py`` — imported, never re-implemented:

* the conversation is the haystack with the most user turns among the first 40
  questions of the LongMemEval dev split (``longmemeval.history_messages``:
  sessions in order, the session date as a header on each session's first
  user message);
* request k sends the haystack's messages up to its k-th user turn (the
  haystack's own assistant replies before it, never the fake's echo), with
  ``X-VC-Session`` and ``X-VC-Context-Ceiling``; between requests the
  conversation's background work gets up to ``wait`` seconds (until its
  request is recorded and ``pending_jobs`` is 0, or the wait runs out);
* direct = ``billing.canonical`` of each body the client sent, proxied = of
  the body that reached the fake provider for it; ``billing.summarise`` of the
  first ``turns`` requests and of all replayed requests;
* each layout (``stable``: the account's ``cache_aware_layout``; ``rewrite``:
  off) gets its own account, vckey, conversation and provider key (the fake
  provider computes its cache usage per provider key and model);
* evidence recall (``evidence.score_payload``) of the final replayed request's
  upstream body and of one more request, the history plus the haystack's
  question (not billed), for the question the haystack belongs to.

Where two consecutive upstream bodies first differ is reported per request
(``where_prefix_breaks``): in the tools, the system block, the previous
request's last message (the volatile tail: expected) or an earlier message
(the stable prefix moved: compaction or a rewrite).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from memory_app.bench import longmemeval
from memory_app.bench.longmemeval import Message, Rig

CACHE_BENCH_DIR = Path(
    os.environ.get("VC_CACHE_BENCH_DIR", str(longmemeval.LONGMEMEVAL_DIR.parent / "cache"))
)
DEFAULT_CACHE_DIR = longmemeval.DEFAULT_CACHE_DIR
LAYOUTS = ("stable", "rewrite")
FIRST_QUESTIONS = 40
POLL_S = 0.05
PROGRESS_EVERY = 10
BREAK_PLACES = ("prefix", "tail", "history", "tools/system")

Progress = Callable[[str], None]


def billing() -> ModuleType:
    """The benchmark's ``billing.py``, loaded from the benchmark directory."""
    module = sys.modules.get("billing")
    if module is None:
        spec = importlib.util.spec_from_file_location("billing", CACHE_BENCH_DIR / "billing.py")
        if spec is None or spec.loader is None:
            raise FileNotFoundError(CACHE_BENCH_DIR / "billing.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["billing"] = module
        spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ the conversation


def user_turns(question: dict[str, Any]) -> int:
    return sum(
        t["role"] == "user" and bool(t["content"].strip())
        for session in question["haystack_sessions"]
        for t in session
    )


def conversation_question(split: str = "dev") -> dict[str, Any]:
    """The question whose haystack has the most user turns among the first 40."""
    questions = longmemeval.evidence().load_questions(str(longmemeval.split_path(split)))
    return max(itertools.islice(questions, FIRST_QUESTIONS), key=user_turns)


def requests_of(history: list[Message]) -> Iterator[list[Message]]:
    """The client's messages at each user turn: everything up to and including it."""
    for i, message in enumerate(history):
        if message["role"] == "user":
            yield history[: i + 1]


# ------------------------------------------------------------------ one layout


@dataclass
class Replay:
    """What one layout's replay collected."""

    layout: str
    direct: list[str] = field(default_factory=list)
    proxied: list[str] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    usage: list[dict[str, int]] = field(default_factory=list)
    request_s: list[float] = field(default_factory=list)
    settle_s: list[float] = field(default_factory=list)
    unsettled: int = 0
    extra_upstream: int = 0  # upstream calls beyond one per request (vc_* tool loop)
    last_body: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    conversation: str = ""
    seconds: float = 0.0


@dataclass
class Client:
    """One layout's client: its vckey, provider key and session."""

    layout: str
    rig: Rig
    key: str
    provider_key: str
    session: str
    ceiling: int

    @staticmethod
    def body(messages: list[Message]) -> dict[str, Any]:
        return {"model": longmemeval.MODEL, "max_tokens": 64, "messages": messages}

    def post(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Send one request; the conversation id and the reply's usage."""
        headers = {
            **longmemeval.HEADERS,
            "x-api-key": self.provider_key,
            "x-vc-session": self.session,
            "x-vc-context-ceiling": str(self.ceiling),
        }
        response = self.rig.client.post(f"/v/{self.key}/v1/messages", json=body, headers=headers)
        response.raise_for_status()
        return response.headers["x-vc-conversation"], response.json().get("usage") or {}

    def settle(self, conversation: str, requests: int, wait: float) -> bool:
        """Wait until the request is recorded and no memory job is pending (twice
        in a row: the writer enqueues the job just after it records the request)."""
        deadline = time.monotonic() + wait
        url, auth = f"/api/v1/conversations/{conversation}", {"authorization": f"Bearer {self.key}"}
        quiet = 0
        while time.monotonic() < deadline:
            d = self.rig.client.get(url, headers=auth).json()
            quiet = quiet + 1 if d["request_count"] >= requests and not d["pending_jobs"] else 0
            if quiet >= 2:
                return True
            time.sleep(POLL_S)
        return False


def layout_replay(
    client: Client,
    history: list[Message],
    *,
    wait: float,
    progress: Progress | None = None,
) -> Replay:
    """Every request of the conversation through the proxy, in order."""
    bill = billing()
    replay = Replay(layout=client.layout)
    fake = client.rig.upstream.fake
    started = time.perf_counter()
    total = sum(m["role"] == "user" for m in history)
    for k, messages in enumerate(requests_of(history), start=1):
        fake.requests.clear()
        sent = client.body(messages)
        t0 = time.perf_counter()
        replay.conversation, usage = client.post(sent)
        t1 = time.perf_counter()
        body = _upstream_body(fake, replay)
        replay.direct.append(bill.canonical(sent))
        replay.proxied.append(bill.canonical(body))
        replay.usage.append(_usage(usage))
        if replay.last_body:
            replay.breaks.append(prefix_break(replay.last_body, body))
        replay.last_body = body
        settled = client.settle(replay.conversation, k, wait)
        replay.unsettled += not settled
        replay.request_s.append(t1 - t0)
        replay.settle_s.append(time.perf_counter() - t1)
        if progress and (k % PROGRESS_EVERY == 0 or k == total):
            progress(_progress_line(replay, k, total, time.perf_counter() - started))
    replay.seconds = time.perf_counter() - started
    return replay


def _upstream_body(fake: Any, replay: Replay) -> dict[str, Any]:
    sent = [r for r in fake.requests if r.path.endswith("/v1/messages")]
    if not sent:
        raise RuntimeError("the fake provider received no request")
    replay.extra_upstream += len(sent) - 1
    return dict(sent[0].json)


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    names = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return {name: int(usage.get(name) or 0) for name in names}


def _progress_line(replay: Replay, k: int, total: int, elapsed: float) -> str:
    summary = billing().summarise(replay.direct, replay.proxied)
    last = replay.usage[-1]
    return (
        f"[{replay.layout}] turn {k}/{total}: billed ratio {summary['billed_ratio']},"
        f" raw ratio {summary['raw_ratio']}; upstream {len(replay.proxied[-1]) // 4:,}"
        f" of {len(replay.direct[-1]) // 4:,} tokens, provider cache read"
        f" {last['cache_read_input_tokens']:,} / write {last['cache_creation_input_tokens']:,};"
        f" {elapsed:.0f} s, last settle {replay.settle_s[-1]:.1f} s"
        + (f", {replay.unsettled} waits ran out" if replay.unsettled else "")
    )


# ------------------------------------------------------------------ where prefixes break


def _message_spans(body: dict[str, Any]) -> list[tuple[int, int]]:
    """(start, end) of each message in ``billing.canonical(body)``."""
    at = 1  # after "["
    for key in billing().PROMPT_KEYS:
        value = body.get(key)
        if key == "messages" and isinstance(value, list):
            spans = []
            at += 1
            for message in value:
                text = _dumps(message)
                spans.append((at, at + len(text)))
                at += len(text) + 1
            return spans
        at += len(_dumps(value)) + 1
    return []


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def prefix_break(previous: dict[str, Any], body: dict[str, Any]) -> str:
    """Where ``body`` first differs from ``previous``: ``prefix`` (after all of
    the previous messages: it extends them), ``tail`` (in the previous
    request's last message), ``history`` (in an earlier message) or
    ``tools/system`` (before the messages)."""
    bill = billing()
    shared = bill.common_prefix(bill.canonical(previous), bill.canonical(body))
    messages = _message_spans(previous)
    if not messages or shared < messages[0][0]:
        return "tools/system"
    if shared >= messages[-1][1]:
        return "prefix"
    return "tail" if shared >= messages[-1][0] else "history"


# ------------------------------------------------------------------ the run


def run(
    *,
    turns: int = 150,
    ceiling: int = 8_000,
    layouts: tuple[str, ...] = LAYOUTS,
    wait: float = 10.0,
    embedder: str = "hashing",
    max_turns: int | None = None,
    split: str = "dev",
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Replay the conversation once per layout; summaries at ``turns`` and at the end."""
    question = conversation_question(split)
    history = _history_cut(longmemeval.history_messages(question), max_turns)
    replayed = sum(m["role"] == "user" for m in history)
    turns = min(turns, replayed)
    replays: dict[str, Replay] = {}
    with longmemeval._rig(embedder, cache_dir, wait) as rig:
        clients, warm_up_key = _clients_create(rig, layouts, ceiling)
        warm_up_s = longmemeval._warm_up(rig, warm_up_key)
        for layout in layouts:
            replay = layout_replay(clients[layout], history, wait=wait, progress=progress)
            replay.evidence = _evidence(clients[layout], question, history, replay)
            replays[layout] = replay
    return {
        "question_id": question["question_id"],
        "user_turns": user_turns(question),
        "replayed_turns": replayed,
        "turns": turns,
        "ceiling": ceiling,
        "wait_s": wait,
        "embedder": embedder,
        "warm_up_s": round(warm_up_s, 2),
        "layouts": {name: layout_figures(r, turns) for name, r in replays.items()},
    }


def _history_cut(history: list[Message], max_turns: int | None) -> list[Message]:
    """The history up to and including the reply to user turn ``max_turns``."""
    if max_turns is None:
        return history
    users = [i for i, m in enumerate(history) if m["role"] == "user"]
    if max_turns >= len(users):
        return history
    return history[: users[max_turns]]


def _clients_create(
    rig: Rig, layouts: tuple[str, ...], ceiling: int
) -> tuple[dict[str, Client], str]:
    """A client per layout (its own account, vckey and provider key); the vckey
    of one more account for the warm-up."""
    stamp = time.time_ns()
    users = {layout: f"cache-{layout}-{stamp}" for layout in (*layouts, "warmup")}
    keys = longmemeval._accounts_create(rig.server, [(u, ceiling) for u in users.values()])
    rewrite = [users[layout] for layout in layouts if layout == "rewrite"]
    if rewrite:
        longmemeval.layout_off(rig.server, rewrite)
    clients = {
        layout: Client(
            layout, rig, keys[users[layout]], f"sk-bench-{layout}", users[layout], ceiling
        )
        for layout in layouts
    }
    return clients, keys[users["warmup"]]


def _evidence(
    client: Client, question: dict[str, Any], history: list[Message], replay: Replay
) -> dict[str, Any]:
    """Evidence recall of the final replayed request, and of the question asked after it."""
    evidence = longmemeval.evidence()
    final = evidence.score_payload(question, longmemeval.payload_text(replay.last_body))
    fake = client.rig.upstream.fake
    fake.requests.clear()
    client.post(client.body([*history, longmemeval.question_message(question)]))
    asked = evidence.score_payload(question, longmemeval.payload_text(_upstream_body(fake, replay)))
    fake.requests.clear()
    return {"final_request": final, "question": asked}


# ------------------------------------------------------------------ figures


def layout_figures(replay: Replay, turns: int) -> dict[str, Any]:
    bill = billing()
    n = len(replay.direct)
    summaries = {
        str(turns): bill.summarise(replay.direct[:turns], replay.proxied[:turns]),
        str(n): bill.summarise(replay.direct, replay.proxied),
    }
    return {
        "summaries": summaries,
        "where_prefix_breaks": {
            str(turns): dict(Counter(replay.breaks[: turns - 1]).most_common()),
            str(n): dict(Counter(replay.breaks).most_common()),
        },
        "provider_usage": {
            str(turns): _usage_sum(replay.usage[:turns]),
            str(n): _usage_sum(replay.usage),
        },
        "evidence": replay.evidence,
        "timing": {
            "replay_s": round(replay.seconds, 1),
            "request_ms_mean": round(1000 * sum(replay.request_s) / n, 1),
            "request_ms_max": round(1000 * max(replay.request_s), 1),
            "settle_s_mean": round(sum(replay.settle_s) / n, 2),
            "settle_s_max": round(max(replay.settle_s), 2),
            "waits_ran_out": replay.unsettled,
        },
        "extra_upstream_calls": replay.extra_upstream,
        "conversation_id": int(replay.conversation),
    }


def _usage_sum(rows: list[dict[str, int]]) -> dict[str, int]:
    return {name: sum(r[name] for r in rows) for name in rows[0]} if rows else {}


def report(result: dict[str, Any]) -> str:
    """The summaries as JSON lines, then one table with a column per layout and span."""
    layouts = result["layouts"]
    lines = []
    for name, figures in layouts.items():
        for span, summary in figures["summaries"].items():
            lines.append(f"billing.summarise [{name}] @{span} turns: {json.dumps(summary)}")
    lines += ["", *_table(result)]
    return "\n".join(lines)


def _table(result: dict[str, Any]) -> Iterator[str]:
    yield (
        f"Prompt-cache billing: LongMemEval {result['question_id']} haystack,"
        f" {result['replayed_turns']} of {result['user_turns']} user turns replayed,"
        f" ceiling {result['ceiling']:,}, wait {result['wait_s']:g} s,"
        f" embedder {result['embedder']}"
    )
    columns = [
        (name, span, figures)
        for name, figures in result["layouts"].items()
        for span in figures["summaries"]
    ]
    yield f"{'':<34}" + "".join(f"{f'{n} @{s}':>18}" for n, s, _ in columns)
    for label, cell in _ROWS:
        yield f"{label:<34}" + "".join(f"{cell(f, s):>18}" for _, s, f in columns)
    for name, figures in result["layouts"].items():
        ev, t = figures["evidence"], figures["timing"]
        yield (
            f"  [{name}] evidence: final request {_hit(ev['final_request'])},"
            f" question after it {_hit(ev['question'])};"
            f" replay {t['replay_s']:.0f} s, request {t['request_ms_mean']:.0f} ms mean"
            f" ({t['request_ms_max']:.0f} max), settle {t['settle_s_mean']:.2f} s mean"
            f" ({t['settle_s_max']:.1f} max), waits ran out {t['waits_ran_out']}"
        )


def _hit(row: dict[str, Any]) -> str:
    if not row.get("scored"):
        return "not scored"
    return "hit" if row["hit"] else "MISS"


def _s(figures: dict[str, Any], span: str) -> dict[str, Any]:
    summary: dict[str, Any] = figures["summaries"][span]
    return summary


_ROWS: list[tuple[str, Callable[[dict[str, Any], str], str]]] = [
    ("billed ratio (proxied / direct)", lambda f, s: f"{_s(f, s)['billed_ratio']:.4f}"),
    ("raw ratio", lambda f, s: f"{_s(f, s)['raw_ratio']:.4f}"),
    ("requests", lambda f, s: f"{_s(f, s)['proxied']['requests']:,}"),
    ("direct raw tokens", lambda f, s: f"{_s(f, s)['direct']['raw_tokens']:,}"),
    ("direct billed tokens", lambda f, s: f"{_s(f, s)['direct']['billed_tokens']:,}"),
    ("proxied raw tokens", lambda f, s: f"{_s(f, s)['proxied']['raw_tokens']:,}"),
    ("proxied billed tokens", lambda f, s: f"{_s(f, s)['proxied']['billed_tokens']:,}"),
    (
        "warm requests direct / proxied",
        lambda f, s: f"{_s(f, s)['direct']['warm']} / {_s(f, s)['proxied']['warm']}",
    ),
    (
        "next differs: none/tail/hist/sys",
        lambda f, s: "/".join(str(f["where_prefix_breaks"][s].get(k, 0)) for k in BREAK_PLACES),
    ),
    (
        "provider cache read (fake)",
        lambda f, s: f"{f['provider_usage'][s].get('cache_read_input_tokens', 0):,}",
    ),
    (
        "provider cache write (fake)",
        lambda f, s: f"{f['provider_usage'][s].get('cache_creation_input_tokens', 0):,}",
    ),
]
