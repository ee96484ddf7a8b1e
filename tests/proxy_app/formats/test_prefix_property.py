"""Two requests planned between compactions share the provider's cached prefix,
in every wire format (ARCHITECTURE.md, "The payload keeps the provider's prompt
cache warm").

A random conversation (user and assistant texts of random lengths and scripts,
tool call/result chains, session markers on replies) is planned twice with the
pure engine (``assembly.plan_payload``), at the same watermark and with the same
stored memory (topic hint, tag summaries, units) but each with its own retrieval
hits: once when the client's request ends with a user message, once a few
rounds later. Each upstream body is ``planned_body`` of the client's body as the
format's adapter parses it. Bodies are compared as a prompt cache sees them:
``canonical`` of ``shared/benchmarks/cache/billing.py`` (the JSON of tools,
system, instructions, system instruction, then the history), Gemini's camelCase
``systemInstruction`` counted as ``system_instruction`` as the fake provider
does (``billing.canonical`` alone would leave Gemini's system out).

A request that ends with a tool result keeps the property too (the recall block
follows the tool results), except in Gemini, where a function response content
carries nothing else and the block goes to the system position: that case is a
strict ``xfail``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import date
from functools import partial
from random import Random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_app.bench.cache import billing
from memory_app.config import MemoryConfig
from memory_app.engine import tokens
from memory_app.engine.assembly import plan_payload
from memory_app.engine.types import MemoryUnit, PayloadPlan, PlanInputs, Scored, TurnView
from memory_app.services.planning import fixed_tokens, history_views
from proxy_app.formats import ADAPTERS, HISTORY_FIELD
from proxy_app.formats.marker import marker_text
from proxy_app.formats.recall import planned_body
from proxy_app.formats.types import FORMATS, Exchange, Format

MODELS: dict[Format, str] = {
    "anthropic": "claude-sonnet-4-5",
    "openai_chat": "gpt-4o",
    "openai_responses": "gpt-4o",
    "gemini": "gemini-2.5-flash",
}
CONFIG = MemoryConfig()  # the product's protected turns and its window, stable and recall shares
MARK = marker_text("c42.sig")  # what the proxy appends to a reply; clients resend it
EPHEMERAL = {"type": "ephemeral"}
SENTINEL = "\x00the item\x00"
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------------------------ conversations


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Round:
    """A user message, the tool steps the model took for it, and its reply."""

    user: str
    user_as_blocks: bool  # content as a list of blocks/parts, not a string
    steps: tuple[tuple[Call, ...], ...]
    reply: str
    marked: bool  # the reply carries the proxy's session marker


WORDS = st.sampled_from(
    ["the", "parcel", "left", "Lisbon", "on", "Tuesday", "café", "日本語", "🚀", '"quoted"']
    + ["back\\slash", "line\nbreak", "{json:1}", "<tag>", "ünïcödé", "12.5%", "naïve"]
)
PROSE = st.lists(WORDS, min_size=1, max_size=80).map(" ".join)
NOISE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=60)
TEXT = st.one_of(PROSE, NOISE)
SHORT = st.lists(WORDS, min_size=1, max_size=25).map(" ".join)
CALLS = st.builds(
    Call,
    name=st.sampled_from(["lookup", "search", "read_file"]),
    args=st.dictionaries(st.sampled_from(["q", "path", "n"]), st.one_of(st.integers(), SHORT)),
    result=TEXT,
)
ROUNDS = st.builds(
    Round,
    user=TEXT,
    user_as_blocks=st.booleans(),
    steps=st.lists(st.lists(CALLS, min_size=1, max_size=2).map(tuple), max_size=2).map(tuple),
    reply=TEXT,
    marked=st.booleans(),
)


def user_item(fmt: Format, text: str, blocks: bool) -> dict[str, Any]:
    if fmt == "gemini":
        half = len(text) // 2
        parts = [{"text": text[:half]}, {"text": text[half:]}] if blocks and half else None
        return {"role": "user", "parts": parts or [{"text": text}]}
    if not blocks:
        return {"role": "user", "content": text}
    part = "input_text" if fmt == "openai_responses" else "text"
    return {"role": "user", "content": [{"type": part, "text": text}]}


def reply_item(fmt: Format, text: str) -> dict[str, Any]:
    if fmt == "gemini":
        return {"role": "model", "parts": [{"text": text}]}
    if fmt == "openai_responses":
        content = [{"type": "output_text", "text": text, "annotations": []}]
        return {"type": "message", "role": "assistant", "content": content}
    if fmt == "anthropic":
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}
    return {"role": "assistant", "content": text}


def step_items(fmt: Format, calls: tuple[Call, ...], tag: str) -> list[dict[str, Any]]:
    """The model's calls and the client's results, as the format carries them."""
    ids = [f"call_{tag}_{i}" for i in range(len(calls))]
    pairs = list(zip(ids, calls, strict=True))
    if fmt == "anthropic":
        uses = [{"type": "tool_use", "id": i, "name": c.name, "input": c.args} for i, c in pairs]
        results = [{"type": "tool_result", "tool_use_id": i, "content": c.result} for i, c in pairs]
        return [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    if fmt == "openai_chat":
        made = [
            {"id": i, "type": "function", "function": {"name": c.name, "arguments": _args(c)}}
            for i, c in pairs
        ]
        answers = [{"role": "tool", "tool_call_id": i, "content": c.result} for i, c in pairs]
        return [{"role": "assistant", "content": None, "tool_calls": made}, *answers]
    if fmt == "openai_responses":
        made = [
            {"type": "function_call", "call_id": i, "name": c.name, "arguments": _args(c)}
            for i, c in pairs
        ]
        outputs = [
            {"type": "function_call_output", "call_id": i, "output": c.result} for i, c in pairs
        ]
        return [*made, *outputs]
    calls_part = [{"functionCall": {"name": c.name, "args": c.args}} for c in calls]
    answers_part = [
        {"functionResponse": {"name": c.name, "response": {"result": c.result}}} for c in calls
    ]
    return [{"role": "model", "parts": calls_part}, {"role": "user", "parts": answers_part}]


def _args(call: Call) -> str:
    return json.dumps(call.args, ensure_ascii=False)


def history(fmt: Format, rounds: list[Round], *, upto: int, tail: str) -> list[dict[str, Any]]:
    """The client's history: ``rounds[:upto]`` whole, then of ``rounds[upto]``
    the user message (``tail="user"``) or everything up to its last tool
    result (``tail="tool"``)."""
    items: list[dict[str, Any]] = []
    for n, r in enumerate(rounds[: upto + 1]):
        items.append(user_item(fmt, r.user, r.user_as_blocks))
        last = n == upto
        if last and tail == "user":
            break
        for s, calls in enumerate(r.steps):
            items += step_items(fmt, calls, f"{n}_{s}")
        if last:
            break
        items.append(reply_item(fmt, r.reply + (MARK if r.marked else "")))
    return items


def client_body(
    fmt: Format, items: list[dict[str, Any]], system: str, client_marks: bool
) -> dict[str, Any]:
    names = ["lookup", "search", "read_file"]
    schema = {"type": "object", "properties": {}}
    if fmt == "anthropic":
        tools = [{"name": n, "description": f"{n} tool", "input_schema": schema} for n in names]
        marked = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        body: dict[str, Any] = {"model": MODELS[fmt], "max_tokens": 1024, "tools": tools}
        return {**body, "system": marked if client_marks else system, "messages": items}
    if fmt == "openai_chat":
        tools = [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
        messages = [{"role": "system", "content": system}, *items]
        return {"model": MODELS[fmt], "tools": tools, "messages": messages}
    if fmt == "openai_responses":
        tools = [{"type": "function", "name": n, "parameters": schema} for n in names]
        return {"model": MODELS[fmt], "instructions": system, "tools": tools, "input": items}
    declarations = [{"name": n, "parameters": schema} for n in names]
    return {
        "systemInstruction": {"parts": [{"text": system}]},
        "tools": [{"functionDeclarations": declarations}],
        "contents": items,
    }


# ------------------------------------------------------------------ planning


@dataclass(frozen=True)
class Memory:
    """What the memory job has stored: the same for both requests."""

    watermark: int
    topic_hint: list[tuple[str, int, str]]
    summaries: list[MemoryUnit]
    segment: str
    days: list[date | None]


def parse(fmt: Format, body: dict[str, Any]) -> Exchange:
    model = MODELS[fmt] if fmt == "gemini" else None
    return ADAPTERS[fmt].parse_request(body, model=model, stream=False if model else None)


def units_of(first: list[TurnView], memory: Memory, count: Any) -> dict[str, MemoryUnit]:
    """Units of the turns the first request holds, one segment over the compacted
    turns, and the tag summaries (the same units for both requests)."""
    units = {
        f"t:{v.position}": MemoryUnit(
            "turn",
            f"t:{v.position}",
            v.text,
            [],
            v.position,
            v.position,
            memory.days[v.position % len(memory.days)],
            count(v.text),
        )
        for v in first
    }
    end = memory.watermark - 1
    units["s:1"] = MemoryUnit("segment", "s:1", memory.segment, [], 0, end, memory.days[0], 0)
    units.update({u.key: u for u in memory.summaries})
    return units


def plan(
    exchange: Exchange,
    turns: list[TurnView],
    *,
    memory: Memory,
    units: dict[str, MemoryUnit],
    keys: list[str],
    ceiling: int,
) -> PayloadPlan:
    encoding = tokens.encoding_for(exchange.format, exchange.model)
    scored = [Scored(key=key, score=1.0 / (rank + 1)) for rank, key in enumerate(keys)]
    return plan_payload(
        PlanInputs(
            ceiling=ceiling,
            fixed_tokens=fixed_tokens(exchange, encoding),
            turns=turns,
            watermark=memory.watermark,
            count=partial(tokens.count_text, encoding=encoding),
            protected_turns=CONFIG.protected_turns,
            scored=scored,
            units=units,
            topic_hint=memory.topic_hint,
            stable_summaries=memory.summaries,
            window_share=CONFIG.window_share,
            stable_share=CONFIG.stable_share,
            recall_share=CONFIG.recall_share,
        )
    )


# ------------------------------------------------------------------ canonical form


def canonical(body: dict[str, Any]) -> str:
    system = body.get("system_instruction", body.get("systemInstruction"))
    return str(billing().canonical({**body, "system_instruction": system}))


def item_span(fmt: Format, body: dict[str, Any], index: int) -> tuple[int, int]:
    """Where history item ``index`` (negative: from the end) starts and ends in
    ``canonical(body)``."""
    field = HISTORY_FIELD[fmt]
    items = body[field]
    index %= len(items)
    probe = canonical({**body, field: [*items[:index], SENTINEL]})
    start = probe.index(json.dumps(SENTINEL))
    item = json.dumps(items[index], ensure_ascii=False, separators=(",", ":"))
    return start, start + len(item)


def without_marks(value: Any) -> Any:
    """An Anthropic body with no ``cache_control`` and every string content as
    one text block: the same prompt, breakpoints aside."""
    if isinstance(value, list):
        return [without_marks(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: without_marks(v) for k, v in value.items() if k != "cache_control"}
    if out.get("role") in ("user", "assistant") and isinstance(out.get("content"), str):
        out["content"] = [{"type": "text", "text": out["content"]}]
    return out


# ------------------------------------------------------------------ the property


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    rounds = draw(st.lists(ROUNDS, min_size=3, max_size=6))
    first = draw(st.integers(1, len(rounds) - 2))
    later = draw(st.integers(first + 1, min(len(rounds) - 1, first + 3)))
    tags = draw(
        st.lists(
            st.sampled_from(["travel", "cooking", "code"]), unique=True, min_size=1, max_size=3
        )
    )
    return {
        "rounds": rounds,
        "first": first,
        "later": later,
        "system": draw(TEXT),
        "client_marks": draw(st.booleans()),
        "watermark": draw(st.floats(0.0, 1.0)),
        "topic_hint": [(t, draw(st.integers(1, 40)), draw(SHORT)) for t in tags],
        "summaries": [draw(SHORT) for _ in tags[: draw(st.integers(0, 2))]],
        "segment": draw(SHORT),
        "days": draw(st.lists(st.none() | st.dates(), min_size=1, max_size=4)),
        "hits": (draw(st.randoms()), draw(st.randoms())),
        "slack": draw(st.integers(0, 4_000)),
    }


def memory_for(case: dict[str, Any], first: list[TurnView], count: Any) -> Memory:
    """The stored memory: the watermark inside the first request, somewhere from
    its second exchange on (a watermark inside the first exchange moves back to
    its user message, leaving nothing compacted to recall), and the stable parts."""
    opening = [i for i, v in enumerate(first) if v.role == "user" and not v.tool_results]
    low, high = opening[1], len(first) - 1
    watermark = low + int(case["watermark"] * (high - low))
    summaries = [
        MemoryUnit("tag_summary", f"g:{tag}", text, [tag], 0, watermark - 1, None, count(text))
        for (tag, _, _), text in zip(case["topic_hint"], case["summaries"], strict=False)
    ]
    return Memory(watermark, case["topic_hint"], summaries, case["segment"], case["days"])


def hits_for(case: dict[str, Any], units: dict[str, MemoryUnit]) -> list[list[str]]:
    """Retrieval per request: it differs per message, and a compacted turn is
    always among the hits."""
    hits = []
    for rng in case["hits"]:
        keys = sorted(units)
        rng.shuffle(keys)
        hits.append(["t:0", *[k for k in keys[: rng.randint(0, 8)] if k != "t:0"]])
    return hits


def planned_pair(fmt: Format, case: dict[str, Any], *, tail: str = "user") -> dict[str, Any]:
    """Both requests of ``case``: their plans and upstream bodies."""
    rounds, system, marks = case["rounds"], case["system"], case["client_marks"]
    ex1 = parse(
        fmt, client_body(fmt, history(fmt, rounds, upto=case["first"], tail=tail), system, marks)
    )
    ex2 = parse(
        fmt, client_body(fmt, history(fmt, rounds, upto=case["later"], tail="user"), system, marks)
    )
    encoding = tokens.encoding_for(fmt, MODELS[fmt])
    count = partial(tokens.count_text, encoding=encoding)
    views1, views2 = history_views(ex1, encoding), history_views(ex2, encoding)
    memory = memory_for(case, views1, count)
    units = units_of(views1, memory, count)
    hits = hits_for(case, units)
    # Under the ceiling: the second request's whole history fits with room to spare.
    ceiling = fixed_tokens(ex2, encoding) + int(1.2 * sum(v.tokens for v in views2)) + 2_000
    ceiling += case["slack"]
    plan1 = plan(ex1, views1, memory=memory, units=units, keys=hits[0], ceiling=ceiling)
    plan2 = plan(ex2, views2, memory=memory, units=units, keys=hits[1], ceiling=ceiling)
    adapter = ADAPTERS[fmt]
    return {
        "plans": (plan1, plan2),
        "bodies": (planned_body(adapter, ex1, plan1), planned_body(adapter, ex2, plan2)),
        "bare": planned_body(adapter, ex1, replace(plan1, recall_block="")),
        "latest": len(views2) - 1,
    }


@PROPERTY
@given(case=cases())
@pytest.mark.parametrize("fmt", FORMATS)
def test_consecutive_requests_share_the_upstream_prefix_up_to_the_earlier_last_turn(
    fmt: Format, case: dict[str, Any]
) -> None:
    """With B1 and B2 the two upstream bodies, C the canonical JSON, and B1°
    the first body rendered with an empty recall block (the recall block is the
    only per-message part of a planned body):

    - C(B2) starts with C(B1°) up to the end of the first request's latest
      message: tools, the client's system prompt, the stable memory block, the
      kept window and that message as the client sent it;
    - C(B1) and C(B1°) agree up to where that latest message starts (the recall
      block goes inside it, after the client's content), so C(B2) starts with
      C(B1) at least up to there;
    - the window does not shrink: the first request's kept positions begin the
      second's, which runs on to its latest turn, and the stable block is the same.

    Anthropic with no ``cache_control`` from the client: the adapter then marks
    the latest message's own content (every string content written as one
    text block), and that mark moves on with each request; the statements
    above hold for the bodies with their ``cache_control`` marks removed
    (``without_marks``).
    """
    pair = planned_pair(fmt, case)
    earlier, later = pair["plans"]
    first, second = pair["bodies"]
    bare = pair["bare"]

    assert not earlier.passthrough
    assert not earlier.window_truncated
    assert not later.window_truncated
    assert earlier.recall_block
    assert later.recall_block
    assert later.stable_block == earlier.stable_block != ""
    assert later.kept_positions[: len(earlier.kept_positions)] == earlier.kept_positions
    assert later.kept_positions == list(range(later.window_start, pair["latest"] + 1))
    assert later.window_start == earlier.window_start

    start, _ = item_span(fmt, first, -1)
    assert canonical(first)[:start] == canonical(bare)[:start]
    assert canonical(first) != canonical(bare)  # the recall block went in the latest message
    proxy_marks = fmt == "anthropic" and not case["client_marks"]
    if proxy_marks:
        before_latest = item_span(fmt, first, -2)[0] if len(first["messages"]) > 1 else start
        assert canonical(second).startswith(canonical(first)[:before_latest])
        first, second, bare = without_marks(first), without_marks(second), without_marks(bare)
        start, _ = item_span(fmt, first, -1)
    _, end = item_span(fmt, bare, -1)
    assert canonical(second).startswith(canonical(bare)[:end])
    assert canonical(second).startswith(canonical(first)[:start])


TOOL_LOOP = {
    "rounds": [
        Round("Where did the parcel go?", False, (), "It left Lisbon on Tuesday.", True),
        Round("And the second one?", False, (), "Still at the depot.", False),
        Round(
            "Look it up again.",
            False,
            ((Call("lookup", {"q": "parcel 2"}, "left the depot at 9"),),),
            "It left at 9.",
            True,
        ),
        Round("Thanks. When does it arrive?", True, (), "Thursday.", False),
    ],
    "first": 2,
    "later": 3,
    "system": "You track parcels.",
    "client_marks": True,  # no mark of the proxy's moves between the two
    "watermark": 0.0,
    "topic_hint": [("travel", 2, "parcels and trips")],
    "summaries": ["Parcels go through the Lisbon depot."],
    "segment": "The user asked where a parcel went.",
    "days": [date(2023, 5, 20)],
    "hits": (Random(1), Random(2)),
    "slack": 0,
}


@pytest.mark.parametrize(
    "fmt",
    [
        *(f for f in FORMATS if f != "gemini"),
        pytest.param(
            "gemini",
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason=(
                    "a Gemini function response content carries only function responses, "
                    "so the recall block for it goes to the system position and the next "
                    "request differs from it there"
                ),
            ),
        ),
    ],
)
def test_a_request_ending_with_a_tool_result_shares_the_prefix_with_the_next(fmt: Format) -> None:
    """The same property when the first request ends with a tool result, as
    most of an agent's requests do: the one after it, ending with the user's
    next message, starts with it up to where its last item starts."""
    pair = planned_pair(fmt, TOOL_LOOP, tail="tool")
    earlier, later = pair["plans"]
    first, second = pair["bodies"]

    assert earlier.recall_block
    assert later.kept_positions[: len(earlier.kept_positions)] == earlier.kept_positions
    start, _ = item_span(fmt, first, -1)
    assert canonical(second).startswith(canonical(first)[:start])
