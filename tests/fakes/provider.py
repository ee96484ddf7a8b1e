"""A fake LLM provider: a real HTTP server speaking four provider wire formats.

Contract
--------
``FakeProvider`` is a plain ASGI callable. Served by uvicorn on a loopback port
(``start_fake_provider()`` runs it in a background thread; ``python -m
tests.fakes.provider --port 8899`` serves it until killed, for benchmarks), it
answers the official SDKs (anthropic, openai, google-genai) the way the real APIs
do, so they parse every reply, stream and error without noticing anything.

Routes (any path prefix before ``/v1`` or ``/v1beta`` is accepted, so a base URL
like ``http://127.0.0.1:PORT/anything`` works):

- Anthropic: ``POST /v1/messages`` (``"stream": true`` or not),
  ``POST /v1/messages/count_tokens``; ``GET /v1/models`` with an
  ``anthropic-version`` header.
- OpenAI: ``POST /v1/chat/completions``, ``POST /v1/responses`` (stream or not),
  ``GET /v1/models``.
- Gemini: ``POST /{v1,v1beta}/models/{model}:generateContent``,
  ``:streamGenerateContent`` (``?alt=sse`` gives SSE, without it a streamed JSON
  array) and ``:countTokens``.
- Anything else: 404 in the error shape of the provider the path/headers suggest.

Replies are deterministic. The text is ``"Echo: " + <text of the last user
message, first 200 chars>`` (or the ``reply_text`` knob). If the request declares
tools, its last user message contains "use tool" and the conversation does not
end with a tool result, the reply is instead a call of the first tool with
arguments ``{"q": "test"}`` in the format's own shape. Images and other blocks
are accepted and ignored.

Usage: input tokens = ``len(raw body) // 4`` in every format; output tokens =
number of words of the reply text (of the arguments JSON for a tool call). The
``cached_tokens`` knob is reported as Anthropic ``cache_read_input_tokens``,
OpenAI ``prompt_tokens_details.cached_tokens`` /
``input_tokens_details.cached_tokens`` and Gemini ``cachedContentTokenCount``;
OpenAI and Gemini count cached tokens inside the prompt total (prompt = uncached
+ cached), Anthropic reports them beside ``input_tokens``, as the real APIs do.
``cache_creation_tokens`` is Anthropic's ``cache_creation_input_tokens``. With
these knobs the cached tokens come on top of the body's tokens.

Computed prompt caching (on by default; ``compute_cache = False`` or header
``x-fake-compute-cache: 0`` turns it off): without those knobs the fake reports
cache usage the way each provider does, from the prompt it saw before. The
*previous request* is the last generating request with the same format,
credential values and model: one "conversation" per credential and model, which
is what a client replaying one conversation looks like (use another key or
model per conversation to keep two apart). A request's prompt is the JSON of
its prompt parts in order (tools, system / instructions / system instruction,
messages / input / contents: ``canonical`` of
``../shared/benchmarks/cache/billing.py``, Gemini's ``systemInstruction``
included), tokens are characters / 4, and the shared part is the longest
common prefix with the previous prompt:

- OpenAI Chat and Responses, Gemini (automatic prefix caching): cached = the
  shared part floored to 128-token steps, 0 below 1,024 tokens.
- Anthropic (explicit breakpoints): the cache entries are the previous
  request's ``cache_control`` marks (the prefix up to the end of each marked
  block; the marks themselves are not part of the prompt, so a mark that moves
  on to a later block still reads the entry an earlier one wrote). Read = the longest of them that lies in the shared part and not past
  this request's last mark; written = this request's last mark minus what was
  read. Each counts only from 1,024 tokens, and exactly (no 128-token steps:
  Anthropic caches at the breakpoint itself). No mark, no caching.

Computed cached and written tokens are carved out of the body's tokens:
uncached = ``len(raw body) // 4`` minus both, so OpenAI's and Gemini's prompt
total stays the body's tokens. When ``cached_tokens`` or
``cache_creation_tokens`` (or their headers) are set, they win and nothing is
computed for that request (its prompt is still remembered as the previous one).

Streams follow each provider's documented event sequence; the text goes out in
one delta per word, each delta a separate ASGI body message (``more_body=True``).

Credentials: a request needs ``x-api-key``, ``Authorization: Bearer …``,
``x-goog-api-key`` or a ``key=`` query parameter, else it gets the provider's
401. ``Recorded.auth`` lists which of them the request carried.

Knobs, as attributes of ``FakeProvider`` or per request as headers (a header
wins, so a client in another process can drive the fake):

- ``fail_next(status, body=None, times=1)`` / ``x-fake-status: 500``: answer
  with that status and the provider's error JSON (or ``body`` verbatim).
- ``stream_delay`` / ``x-fake-delay: 0.2``: seconds slept before each delta
  (a reply that is not streamed: between its headers and its body).
- ``break_stream_after = N`` / ``x-fake-break-after: 2``: after N deltas close
  the connection without the terminal events (an incomplete chunked body).
- ``cached_tokens`` / ``x-fake-cached: 100``: cached input tokens in usage.
- ``cache_creation_tokens`` / ``x-fake-cache-write: 50``: Anthropic cache writes.
- ``compute_cache`` / ``x-fake-compute-cache: 0``: compute cache usage from the
  previous prompt (above; on unless turned off).
- ``reply_text`` / ``x-fake-reply: hi``: reply text instead of the echo (ASCII).

``fail_next`` is consumed by the next request(s) that reach a route with a
credential; the SDKs retry 5xx/429 by default, so pass ``times=`` or build the
client with ``max_retries=0``. ``fake.requests`` records every request (unless
``record=False``); ``fake.client_disconnects`` counts streams the client closed
before their end (the fake then stops sending, as a provider stops generating);
``fake.reset()`` clears recordings and counters and restores the knobs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import orjson
import uvicorn

Json = dict[str, Any]
Message = dict[str, Any]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
T = TypeVar("T")

CREATED = 1_700_000_000  # a fixed timestamp keeps replies byte-for-byte deterministic
MAX_ECHO = 200
TOOL_ARGS_JSON = '{"q": "test"}'
TOOL_ARGS_PIECES = ('{"q": ', '"test"}')
MODELS = ("fake-small", "fake-large")

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any  # parsed body, None when empty or not JSON
    auth: tuple[str, ...] = ()  # credentials present: x-api-key, authorization, ...


@dataclass(frozen=True)
class Knobs:
    """The knobs in force for one request (headers override attributes)."""

    delay: float
    break_after: int | None
    cached: int | None  # None: not set
    cache_write: int | None
    reply_text: str | None
    compute_cache: bool = False

    @property
    def explicit_cache(self) -> bool:
        return self.cached is not None or self.cache_write is not None


@dataclass(frozen=True)
class CacheUse:
    """Prompt-cache tokens of one request: read from the cache, written to it."""

    read: int = 0
    write: int = 0


@dataclass(frozen=True)
class Call:
    """A routed, authenticated request, handed to a format handler."""

    n: int  # per-fake counter, used in ids
    body: Json
    raw_len: int
    query: dict[str, str]
    knobs: Knobs
    params: dict[str, str]  # route groups (Gemini model and operation)
    cache: CacheUse | None = None  # computed cache usage (compute_cache), else the knobs

    @property
    def model(self) -> str:
        return self.params.get("model") or str(self.body.get("model") or "fake-model")

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


@dataclass(frozen=True)
class Reply:
    """What the fake model answers: text, or a call of ``tool``."""

    text: str
    tool: str | None
    input_tokens: int  # uncached
    output_tokens: int
    cached: int
    cache_write: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cached


@dataclass(frozen=True)
class JsonReply:
    payload: Any  # JSON-able, or bytes sent as they are
    status: int = 200


@dataclass(frozen=True)
class StreamReply:
    """Frames of a streamed reply; ``deltas`` are what the knobs delay and cut."""

    pre: list[bytes]
    deltas: list[bytes]
    post: list[bytes]
    content_type: bytes = b"text/event-stream; charset=utf-8"


Result = JsonReply | StreamReply
Handler = Callable[[Call], Result]


class StreamBroken(Exception):
    """Raised to make uvicorn drop the connection mid-stream (break knob)."""


class _HideDeliberateBreaks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamBroken))


_HIDE_BREAKS = _HideDeliberateBreaks()

# ------------------------------------------------------------------ request reading


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[Json]:
    return [item for item in _list(value) if isinstance(item, dict)]


def _dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def text_of(content: Any) -> str:
    """The text of a message content: a string, or blocks/parts carrying ``text``."""
    if isinstance(content, str):
        return content
    texts = []
    for block in _dicts(content):
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "content" in block:  # Anthropic tool_result
            texts.append(text_of(block["content"]))
    return " ".join(text for text in texts if text)


def last_user_text(messages: list[Json], key: str, roles: Iterable[str | None]) -> str:
    """Text of the last user message that has any text."""
    wanted = set(roles)
    for message in reversed(messages):
        if message.get("role") in wanted and (text := text_of(message.get(key))):
            return text
    return ""


def _first_name(names: Iterable[Any]) -> str | None:
    return next((name for name in names if isinstance(name, str) and name), None)


def _tool_wanted(text: str, tool: str | None, ends_with_result: bool) -> str | None:
    if tool and not ends_with_result and "use tool" in text.lower():
        return tool
    return None


def make_reply(call: Call, user_text: str, tool: str | None) -> Reply:
    knobs = call.knobs
    if tool:
        text, words = "", len(TOOL_ARGS_JSON.split())
    else:
        override = knobs.reply_text
        text = override if override is not None else "Echo: " + user_text[:MAX_ECHO]
        words = len(text.split())
    uncached, cached, write = call.raw_len // 4, knobs.cached or 0, knobs.cache_write or 0
    if call.cache is not None:
        cached, write = call.cache.read, call.cache.write
        uncached = max(0, uncached - cached - write)
    return Reply(text, tool, uncached, words, cached, write)


def split_words(text: str) -> list[str]:
    """Stream pieces: one per word, trailing whitespace kept, joined back exactly."""
    return re.findall(r"\S+\s*|\s+", text)


def sse(event: str | None, data: Any) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


# ------------------------------------------------------------------------ Anthropic


def _anthropic_ask(body: Json) -> tuple[str, str | None]:
    messages = _dicts(body.get("messages"))
    last = messages[-1].get("content") if messages else None
    ends_with_result = any(block.get("type") == "tool_result" for block in _dicts(last))
    tool = _first_name(tool.get("name") for tool in _dicts(body.get("tools")))
    text = last_user_text(messages, "content", ["user"])
    return text, _tool_wanted(text, tool, ends_with_result)


def _anthropic_usage(reply: Reply) -> Json:
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_write,
        "cache_read_input_tokens": reply.cached,
        "cache_creation": {
            "ephemeral_5m_input_tokens": reply.cache_write,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": reply.output_tokens,
        "service_tier": "standard",
    }


def _anthropic_block(call: Call, reply: Reply) -> Json:
    if reply.tool:
        tool_id = f"toolu_fake{call.n:08d}"
        return {"type": "tool_use", "id": tool_id, "name": reply.tool, "input": {"q": "test"}}
    return {"type": "text", "text": reply.text}


def anthropic_messages(call: Call) -> Result:
    text, tool = _anthropic_ask(call.body)
    reply = make_reply(call, text, tool)
    message = {
        "id": f"msg_fake{call.n:08d}",
        "type": "message",
        "role": "assistant",
        "model": call.model,
        "content": [_anthropic_block(call, reply)],
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(reply),
    }
    return _anthropic_stream(message, reply) if call.stream else JsonReply(message)


def _anthropic_stream(message: Json, reply: Reply) -> StreamReply:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    block = message["content"][0]
    if reply.tool:
        empty = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in TOOL_ARGS_PIECES]
    else:
        empty = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in split_words(reply.text)]
    final_usage = {key: usage[key] for key in ("input_tokens", "output_tokens")}
    final_usage |= {k: usage[k] for k in ("cache_creation_input_tokens", "cache_read_input_tokens")}
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    return StreamReply(
        pre=[
            sse("message_start", {"type": "message_start", "message": start}),
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": empty},
            ),
            sse("ping", {"type": "ping"}),
        ],
        deltas=[
            sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            for delta in deltas
        ],
        post=[
            sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            sse("message_delta", {"type": "message_delta", "delta": stop, "usage": final_usage}),
            sse("message_stop", {"type": "message_stop"}),
        ],
    )


def anthropic_count_tokens(call: Call) -> Result:
    return JsonReply({"input_tokens": call.raw_len // 4})


def anthropic_models(call: Call) -> Result:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
        for m in MODELS
    ]
    return JsonReply(
        {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]}
    )


# ---------------------------------------------------------------------- OpenAI chat


def _chat_ask(body: Json) -> tuple[str, str | None]:
    messages = _dicts(body.get("messages"))
    ends_with_result = bool(messages) and messages[-1].get("role") in ("tool", "function")
    tool = _first_name(
        _dict(tool.get("function")).get("name") for tool in _dicts(body.get("tools"))
    )
    text = last_user_text(messages, "content", ["user"])
    return text, _tool_wanted(text, tool, ends_with_result)


def _chat_usage(reply: Reply) -> Json:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.prompt_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_base(call: Call, kind: str) -> Json:
    return {
        "id": f"chatcmpl-fake{call.n:08d}",
        "object": kind,
        "created": CREATED,
        "model": call.model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _chat_tool_call(call: Call, reply: Reply, arguments: str) -> Json:
    function = {"name": reply.tool, "arguments": arguments}
    return {"id": f"call_fake{call.n:08d}", "type": "function", "function": function}


REASONING_MODELS = ("o1", "o3", "o4", "gpt-5")


def _reasoning_refusal(body: Json) -> JsonReply | None:
    """OpenAI's reasoning models refuse ``max_tokens`` (they take
    ``max_completion_tokens``) and any temperature but the default 1."""
    if not str(body.get("model") or "").startswith(REASONING_MODELS):
        return None
    if "max_tokens" in body:
        message = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
        param, code = "max_tokens", "unsupported_parameter"
    elif body.get("temperature", 1) != 1:
        message = (
            f"Unsupported value: 'temperature' does not support {body['temperature']} with "
            "this model. Only the default (1) value is supported."
        )
        param, code = "temperature", "unsupported_value"
    else:
        return None
    payload = error_payload("openai", 400, message)
    payload["error"] |= {"param": param, "code": code}
    return JsonReply(payload, 400)


def chat_completions(call: Call) -> Result:
    refused = _reasoning_refusal(call.body)
    if refused is not None:
        return refused
    text, tool = _chat_ask(call.body)
    reply = make_reply(call, text, tool)
    if call.stream:
        return _chat_stream(call, reply)
    message: Json = {"role": "assistant", "content": reply.text, "refusal": None, "annotations": []}
    if tool:
        message |= {"content": None, "tool_calls": [_chat_tool_call(call, reply, TOOL_ARGS_JSON)]}
    finish = "tool_calls" if tool else "stop"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return JsonReply(
        {**_chat_base(call, "chat.completion"), "choices": [choice], "usage": _chat_usage(reply)}
    )


def _chat_stream(call: Call, reply: Reply) -> StreamReply:
    include_usage = bool(_dict(call.body.get("stream_options")).get("include_usage"))
    base = _chat_base(call, "chat.completion.chunk") | ({"usage": None} if include_usage else {})

    def chunk(delta: Json, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse(None, {**base, "choices": [choice]})

    if reply.tool:
        first_call = {"index": 0, **_chat_tool_call(call, reply, "")}
        first: Json = {
            "role": "assistant",
            "content": None,
            "tool_calls": [first_call],
            "refusal": None,
        }
        deltas: list[Json] = [
            {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in TOOL_ARGS_PIECES
        ]
    else:
        first = {"role": "assistant", "content": "", "refusal": None}
        deltas = [{"content": piece} for piece in split_words(reply.text)]
    post = [chunk({}, "tool_calls" if reply.tool else "stop")]
    if include_usage:
        post.append(sse(None, {**base, "choices": [], "usage": _chat_usage(reply)}))
    post.append(b"data: [DONE]\n\n")
    return StreamReply([chunk(first)], [chunk(delta) for delta in deltas], post)


def openai_models(call: Call) -> Result:
    data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "fake"} for m in MODELS]
    return JsonReply({"object": "list", "data": data})


# ----------------------------------------------------------------- OpenAI Responses


def _responses_ask(body: Json) -> tuple[str, str | None]:
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else _dicts(raw)
    ends_with_result = bool(items) and items[-1].get("type") == "function_call_output"
    tools = [tool for tool in _dicts(body.get("tools")) if tool.get("type") == "function"]
    tool = _first_name(tool.get("name") for tool in tools)
    text = last_user_text(items, "content", ["user"])
    return text, _tool_wanted(text, tool, ends_with_result)


def _responses_usage(reply: Reply) -> Json:
    return {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": reply.cached},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.prompt_tokens + reply.output_tokens,
    }


def _output_text(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _responses_item(call: Call, reply: Reply) -> Json:
    if reply.tool:
        return {
            "id": f"fc_fake{call.n:08d}",
            "type": "function_call",
            "status": "completed",
            "arguments": TOOL_ARGS_JSON,
            "call_id": f"call_fake{call.n:08d}",
            "name": reply.tool,
        }
    return {
        "id": f"msg_fake{call.n:08d}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [_output_text(reply.text)],
    }


def _response(call: Call, status: str, output: list[Json], usage: Json | None) -> Json:
    body = call.body
    return {
        "id": f"resp_fake{call.n:08d}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": call.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": _list(body.get("tools")),
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": _dict(body.get("metadata")),
    }


def responses_create(call: Call) -> Result:
    text, tool = _responses_ask(call.body)
    reply = make_reply(call, text, tool)
    item = _responses_item(call, reply)
    done = _response(call, "completed", [item], _responses_usage(reply))
    return _responses_stream(call, reply, item, done) if call.stream else JsonReply(done)


Frames = tuple[list[bytes], list[bytes], list[bytes]]
EventMaker = Callable[..., bytes]


def _responses_stream(call: Call, reply: Reply, item: Json, done: Json) -> StreamReply:
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse(kind, {"type": kind, "sequence_number": next(numbers), **fields})

    pending = _response(call, "in_progress", [], None)
    pre = [
        event("response.created", response=pending),
        event("response.in_progress", response=pending),
    ]
    build = _responses_call_events if reply.tool else _responses_text_events
    item_pre, deltas, post = build(event, reply, item)
    post.append(event("response.output_item.done", output_index=0, item=item))
    post.append(event("response.completed", response=done))
    return StreamReply(pre + item_pre, deltas, post)


def _responses_call_events(event: EventMaker, reply: Reply, item: Json) -> Frames:
    at: Json = {"item_id": item["id"], "output_index": 0}
    added = item | {"status": "in_progress", "arguments": ""}
    pre = [event("response.output_item.added", output_index=0, item=added)]
    kind = "response.function_call_arguments"
    deltas = [event(f"{kind}.delta", **at, delta=piece) for piece in TOOL_ARGS_PIECES]
    post = [event(f"{kind}.done", **at, name=reply.tool, arguments=TOOL_ARGS_JSON)]
    return pre, deltas, post


def _responses_text_events(event: EventMaker, reply: Reply, item: Json) -> Frames:
    at: Json = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    added = item | {"status": "in_progress", "content": []}
    pre = [
        event("response.output_item.added", output_index=0, item=added),
        event("response.content_part.added", **at, part=_output_text("")),
    ]
    deltas = [
        event("response.output_text.delta", **at, delta=piece, logprobs=[])
        for piece in split_words(reply.text)
    ]
    post = [
        event("response.output_text.done", **at, text=reply.text, logprobs=[]),
        event("response.content_part.done", **at, part=_output_text(reply.text)),
    ]
    return pre, deltas, post


# --------------------------------------------------------------------------- Gemini


def _part(part: Json, camel: str, snake: str) -> Any:
    return part.get(camel, part.get(snake))


def _gemini_ask(body: Json) -> tuple[str, str | None]:
    contents = _dicts(body.get("contents"))
    last_parts = _dicts(contents[-1].get("parts")) if contents else []
    ends_with_result = any(_part(p, "functionResponse", "function_response") for p in last_parts)
    declarations = [
        declaration
        for tool in _dicts(body.get("tools"))
        for declaration in _dicts(_part(tool, "functionDeclarations", "function_declarations"))
    ]
    tool = _first_name(declaration.get("name") for declaration in declarations)
    text = last_user_text(contents, "parts", ["user", None])
    return text, _tool_wanted(text, tool, ends_with_result)


def _gemini_usage(reply: Reply) -> Json:
    return {
        "promptTokenCount": reply.prompt_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.prompt_tokens + reply.output_tokens,
        "cachedContentTokenCount": reply.cached,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": reply.prompt_tokens}],
    }


def _gemini_chunk(call: Call, parts: list[Json], final: Reply | None) -> Json:
    candidate: Json = {"content": {"parts": parts, "role": "model"}, "index": 0}
    chunk: Json = {"candidates": [candidate]}
    if final is not None:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = _gemini_usage(final)
    return chunk | {"modelVersion": call.model, "responseId": f"fake{call.n:08d}"}


def _gemini_parts(reply: Reply) -> list[list[Json]]:
    """Parts of each streamed chunk; the last chunk also ends the reply."""
    if reply.tool:
        return [[{"functionCall": {"name": reply.tool, "args": {"q": "test"}}}]]
    return [[{"text": piece}] for piece in split_words(reply.text)] or [[{"text": ""}]]


def gemini_models(call: Call) -> Result:
    operation = call.params["op"]
    if operation == "countTokens":
        return JsonReply({"totalTokens": call.raw_len // 4})
    text, tool = _gemini_ask(call.body)
    reply = make_reply(call, text, tool)
    parts = _gemini_parts(reply)
    if operation == "generateContent":
        return JsonReply(_gemini_chunk(call, [p for chunk in parts for p in chunk], reply))
    chunks = [_gemini_chunk(call, chunk, None) for chunk in parts[:-1]]
    chunks.append(_gemini_chunk(call, parts[-1], reply))
    if call.query.get("alt") == "sse":
        framed = [b"data: " + orjson.dumps(chunk) + b"\r\n\r\n" for chunk in chunks]
        return StreamReply([], framed[:-1], framed[-1:])
    # Without alt=sse Gemini streams one JSON array, element by element.
    framed = [(b"," if i else b"[") + orjson.dumps(c) + b"\r\n" for i, c in enumerate(chunks)]
    return StreamReply([], framed[:-1], [framed[-1], b"]"], b"application/json; charset=UTF-8")


# --------------------------------------------------------------------------- errors

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_CODES = {401: "invalid_api_key", 404: "unknown_url", 429: "rate_limit_exceeded"}
_GEMINI_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_payload(fmt: str, status: int, message: str) -> Json:
    """The error body each provider sends with a non-2xx status."""
    if fmt == "anthropic":
        kind = _ANTHROPIC_ERRORS.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    if fmt == "gemini":
        return {
            "error": {
                "code": status,
                "message": message,
                "status": _GEMINI_STATUSES.get(status, "UNKNOWN"),
            }
        }
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": None,
            "code": _OPENAI_CODES.get(status),
        }
    }


def _guess_format(path: str, headers: dict[str, str]) -> str:
    if "/v1beta" in path or ":" in path or "x-goog-api-key" in headers:
        return "gemini"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


# -------------------------------------------------------------------------- routing

_PREFIX = r"(?:/.*)?"
_ROUTES: list[tuple[str, re.Pattern[str], str, Handler]] = [
    (
        "POST",
        re.compile(_PREFIX + r"/v1/messages/count_tokens"),
        "anthropic",
        anthropic_count_tokens,
    ),
    ("POST", re.compile(_PREFIX + r"/v1/messages"), "anthropic", anthropic_messages),
    ("POST", re.compile(_PREFIX + r"/v1/chat/completions"), "openai", chat_completions),
    ("POST", re.compile(_PREFIX + r"/v1/responses"), "openai", responses_create),
    (
        "POST",
        re.compile(
            _PREFIX + r"/v1(?:beta)?/models/(?P<model>[^/:]+)"
            r":(?P<op>generateContent|streamGenerateContent|countTokens)"
        ),
        "gemini",
        gemini_models,
    ),
]
_MODELS_ROUTE = re.compile(_PREFIX + r"/v1/models")


def route(
    method: str, path: str, headers: dict[str, str]
) -> tuple[str, Handler, dict[str, str]] | None:
    """(format, handler, path params) for a request, None when nothing matches."""
    if method == "GET" and _MODELS_ROUTE.fullmatch(path):
        if "anthropic-version" in headers:
            return "anthropic", anthropic_models, {}
        return "openai", openai_models, {}
    for route_method, pattern, fmt, handler in _ROUTES:
        if method == route_method and (match := pattern.fullmatch(path)):
            return fmt, handler, match.groupdict()
    return None


def credentials(headers: dict[str, str], query: dict[str, str]) -> tuple[str, ...]:
    """Which credentials the request carries (empty: unauthenticated)."""
    found = [name for name in ("x-api-key", "x-goog-api-key") if headers.get(name)]
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        found.append("authorization")
    if query.get("key"):
        found.append("key")
    return tuple(found)


def _header(headers: dict[str, str], name: str, default: T, cast: Callable[[str], T]) -> T:
    value = headers.get(name)
    return default if value is None or value == "" else cast(value)


def _flag(value: str) -> bool:
    return value.strip().lower() not in ("0", "false", "no", "off")


# --------------------------------------------------------------------- prompt cache

PROMPT_KEYS = (
    "tools",
    "system",
    "instructions",
    "system_instruction",
    "messages",
    "input",
    "contents",
)
CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
PROMPTS_KEPT = 1024  # previous prompts remembered (one per format, credential and model)


@dataclass(frozen=True)
class Prompt:
    """A request's prompt as a prompt cache sees it: its canonical text and, for
    Anthropic, the text offsets at which each ``cache_control``-marked block ends."""

    text: str
    marks: tuple[int, ...] = ()


def _canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def prompt_of(body: Json, *, marked: bool = False) -> Prompt:
    """The canonical prompt of a body (billing.py's ``canonical``; Gemini's
    camelCase ``systemInstruction`` counts as ``system_instruction``)."""
    slots = [body.get(key) for key in PROMPT_KEYS]
    slots[3] = body.get("system_instruction", body.get("systemInstruction"))
    if not marked:
        return Prompt(_canonical_json(slots))
    pieces: list[str] = []
    marks: list[int] = []
    _dump_marked(slots, pieces, marks, 0)
    return Prompt("".join(pieces), tuple(sorted(marks)))


def _dump_marked(value: Any, out: list[str], marks: list[int], at: int) -> int:
    """Append ``value`` to ``out`` as ``_canonical_json`` writes it, less its
    ``cache_control`` keys (a mark is not part of the prompt: a request whose
    mark moved on still reads the earlier request's entry), and return the
    offset after it, noting where every dict with ``cache_control`` ends."""
    if isinstance(value, dict):
        out.append("{")
        at += 1
        fields = [(name, item) for name, item in value.items() if name != "cache_control"]
        for i, (name, item) in enumerate(fields):
            head = ("," if i else "") + _canonical_json(name) + ":"
            out.append(head)
            at = _dump_marked(item, out, marks, at + len(head))
        out.append("}")
        if value.get("cache_control"):
            marks.append(at + 1)
        return at + 1
    if isinstance(value, list):
        out.append("[")
        at += 1
        for i, item in enumerate(value):
            if i:
                out.append(",")
                at += 1
            at = _dump_marked(item, out, marks, at)
        out.append("]")
        return at + 1
    text = _canonical_json(value)
    out.append(text)
    return at + len(text)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search: fast on long strings)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cacheable(tokens: int) -> int:
    return tokens if tokens >= CACHE_MIN_TOKENS else 0


def cache_use(fmt: str, previous: Prompt | None, prompt: Prompt) -> CacheUse:
    """What the provider would read from / write to its prompt cache (module docstring)."""
    shared = common_prefix(previous.text, prompt.text) if previous is not None else 0
    if fmt != "anthropic":
        tokens = _cacheable(shared // 4)
        return CacheUse(read=tokens // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS)
    if not prompt.marks:
        return CacheUse()
    last = prompt.marks[-1]
    entries = previous.marks if previous is not None else ()
    hit = max((m for m in entries if m <= min(shared, last)), default=0)
    read = _cacheable(hit // 4)
    written = _cacheable(last // 4)
    return CacheUse(read=read, write=max(0, written - read))


def _generates(handler: Handler, params: dict[str, str]) -> bool:
    """Whether a route runs the model (and so reads and fills the prompt cache)."""
    if handler is gemini_models:
        return params.get("op") != "countTokens"
    return handler in (anthropic_messages, chat_completions, responses_create)


# ------------------------------------------------------------------------ the server


class FakeProvider:
    """ASGI app answering like Anthropic, OpenAI and Gemini (see the module docstring)."""

    def __init__(self, *, record: bool = True) -> None:
        self.record = record
        self.requests: list[Recorded] = []
        self._failures: deque[tuple[int, Any]] = deque()
        self.reset()
        logging.getLogger("uvicorn.error").addFilter(_HIDE_BREAKS)

    def reset(self) -> None:
        """Forget recorded requests and pending failures; restore default knobs."""
        self.requests.clear()
        self._failures.clear()
        self.client_disconnects = 0
        self._ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self.stream_delay: float = 0.0
        self.break_stream_after: int | None = None
        self.cached_tokens: int | None = None
        self.cache_creation_tokens: int | None = None
        self.reply_text: str | None = None
        self.compute_cache: bool = True
        self._prompts: dict[tuple[str, ...], Prompt] = {}

    def fail_next(self, status: int, body: Any = None, *, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status`` (body: the provider's shape)."""
        self._failures.extend([(status, body)] * times)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        fmt, result, knobs = self.respond(scope, body)
        extra = _id_headers(fmt, next(self._request_ids))
        if isinstance(result, StreamReply):
            await self._stream_until_disconnect(receive, send, result, extra, knobs)
        else:
            await _send_json(send, result, extra, knobs.delay)

    async def _stream_until_disconnect(
        self,
        receive: Receive,
        send: Send,
        reply: StreamReply,
        extra: list[tuple[bytes, bytes]],
        knobs: Knobs,
    ) -> None:
        """Send the stream; stop (and count it) if the client disconnects first."""
        streaming = asyncio.ensure_future(_send_stream(send, reply, extra, knobs))
        gone = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait({streaming, gone}, return_when=asyncio.FIRST_COMPLETED)
            if streaming.done():
                streaming.result()  # re-raises StreamBroken (break knob)
                return
            self.client_disconnects += 1
            streaming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await streaming
        finally:
            gone.cancel()
            streaming.cancel()

    def respond(self, scope: Scope, body: bytes) -> tuple[str, Result, Knobs]:
        """Record the request and decide the reply (format, result, knobs)."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        raw_query = scope["query_string"].decode("latin-1")
        query = dict(parse_qsl(raw_query)) if raw_query else {}
        method, path = scope["method"], scope["path"]
        parsed = _loads(body)
        auth = credentials(headers, query)
        if self.record:
            self.requests.append(Recorded(method, path, raw_query, headers, body, parsed, auth))
        knobs = self._knobs(headers)
        matched = route(method, path, headers)
        if matched is None:
            fmt = _guess_format(path, headers)
            return fmt, self._error(fmt, 404, f"Unknown path {method} {path}"), knobs
        fmt, handler, params = matched
        problem = self._problem(fmt, auth, body, parsed, headers)
        if problem is not None:
            return fmt, problem, knobs
        call = Call(next(self._ids), _dict(parsed), len(body), query, knobs, params)
        if knobs.compute_cache and _generates(handler, params):
            call = replace(
                call, cache=self._prompt_seen(fmt, call, headers, b"cache_control" in body)
            )
        return fmt, handler(call), knobs

    def _prompt_seen(
        self, fmt: str, call: Call, headers: dict[str, str], marked: bool
    ) -> CacheUse | None:
        """Remember this prompt as the previous one of its conversation; the cache
        usage computed against the one before (None when the explicit knobs win)."""
        names = ("x-api-key", "authorization", "x-goog-api-key")
        key = (fmt, call.model, *(headers.get(n, "") for n in names), call.query.get("key", ""))
        prompt = prompt_of(call.body, marked=marked and fmt == "anthropic")
        previous = self._prompts.pop(key, None)
        self._prompts[key] = prompt
        if len(self._prompts) > PROMPTS_KEPT:
            del self._prompts[next(iter(self._prompts))]
        return None if call.knobs.explicit_cache else cache_use(fmt, previous, prompt)

    def _problem(
        self, fmt: str, auth: tuple[str, ...], body: bytes, parsed: Any, headers: dict[str, str]
    ) -> JsonReply | None:
        if not auth:
            return self._error(
                fmt, 401, "Missing API key (x-api-key, Bearer, x-goog-api-key or key=)."
            )
        failure = self._next_failure(headers)
        if failure is not None:
            status, custom = failure
            return (
                JsonReply(custom, status)
                if custom is not None
                else self._error(fmt, status, f"Fake failure {status}.")
            )
        if body and not isinstance(parsed, dict):
            return self._error(fmt, 400, "Request body is not a JSON object.")
        return None

    def _next_failure(self, headers: dict[str, str]) -> tuple[int, Any] | None:
        status = _header(headers, "x-fake-status", None, int)
        if status is not None:
            return status, None
        try:
            return self._failures.popleft()
        except IndexError:
            return None

    def _knobs(self, headers: dict[str, str]) -> Knobs:
        return Knobs(
            delay=_header(headers, "x-fake-delay", self.stream_delay, float),
            break_after=_header(headers, "x-fake-break-after", self.break_stream_after, int),
            cached=_header(headers, "x-fake-cached", self.cached_tokens, int),
            cache_write=_header(headers, "x-fake-cache-write", self.cache_creation_tokens, int),
            reply_text=headers.get("x-fake-reply", self.reply_text),
            compute_cache=_header(headers, "x-fake-compute-cache", self.compute_cache, _flag),
        )

    @staticmethod
    def _error(fmt: str, status: int, message: str) -> JsonReply:
        return JsonReply(error_payload(fmt, status, message), status)


def _loads(body: bytes) -> Any:
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _id_headers(fmt: str, n: int) -> list[tuple[bytes, bytes]]:
    if fmt == "anthropic":
        return [(b"request-id", b"req_fake%08d" % n)]
    if fmt == "openai":
        return [(b"x-request-id", b"req_fake%08d" % n)]
    return []


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        return body
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json(
    send: Send, result: JsonReply, extra: list[tuple[bytes, bytes]], delay: float = 0.0
) -> None:
    payload = result.payload
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": result.status, "headers": headers + extra})
    if delay > 0:
        await asyncio.sleep(delay)
    await send({"type": "http.response.body", "body": body})


async def _send_stream(
    send: Send, reply: StreamReply, extra: list[tuple[bytes, bytes]], knobs: Knobs
) -> None:
    headers = [(b"content-type", reply.content_type), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers + extra})
    for frame in reply.pre:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    limit = knobs.break_after if knobs.break_after is not None else len(reply.deltas)
    for frame in reply.deltas[:limit]:
        if knobs.delay > 0:
            await asyncio.sleep(knobs.delay)
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    if knobs.break_after is not None:
        # Leaving the app mid-response makes uvicorn close the connection without
        # the final chunk: clients see a truncated stream, as on a network fault.
        raise StreamBroken(f"stream cut after {limit} deltas (break knob)")
    for frame in reply.post:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# ------------------------------------------------------------------------- running


@dataclass
class RunningFake:
    """A FakeProvider served by uvicorn in a background thread."""

    url: str
    fake: FakeProvider
    server: uvicorn.Server = field(repr=False)
    thread: threading.Thread = field(repr=False)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> RunningFake:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_fake_provider(
    host: str = "127.0.0.1", port: int = 0, *, fake: FakeProvider | None = None
) -> RunningFake:
    """Serve a FakeProvider on ``host:port`` (0: a free port) until ``.stop()``."""
    fake = fake if fake is not None else FakeProvider()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it every reply waits out a 40 ms delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        fake,
        loop="asyncio",
        lifespan="off",
        log_level="warning",
        log_config=None,  # leave the test process's logging alone
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="fake-provider"
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("fake provider failed to start")
        time.sleep(0.01)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return RunningFake(f"http://{shown}:{bound}", fake, server, thread)


def _fastest(preferred: str, module: str, fallback: str) -> str:
    return preferred if importlib.util.find_spec(module) else fallback


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the fake LLM provider until killed.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--record", action="store_true", help="keep every request in memory")
    args = parser.parse_args(argv)
    uvicorn.run(
        FakeProvider(record=args.record),
        host=args.host,
        port=args.port,
        loop=_fastest("uvloop", "uvloop", "asyncio"),
        http=_fastest("httptools", "httptools", "h11"),
        lifespan="off",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
