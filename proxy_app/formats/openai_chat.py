"""Adapter for the OpenAI Chat Completions API (``POST /v1/chat/completions``).

Implements the adapter contract of ``types.py``:

* ``parse_request(body, *, model=None, stream=None) -> Exchange``: one ``Turn`` per
  user/assistant/tool message (legacy ``function`` messages are "tool" turns).
  ``system``/``developer`` messages are not turns: their text, joined by newlines, is
  ``Exchange.system``. Session markers are stripped from assistant content (a string
  or ``text`` parts; a part left empty is dropped unless it was the only one).
* ``render_request(exchange, *, items=None, system_block=None) -> dict``: a shallow
  copy of the body whose ``messages`` are the client's system/developer messages
  (all of them, in their order), then ``{"role": "system", "content": system_block}``
  if given, then the history ``items``.
* ``parse_response(body) -> Reply`` / ``add_marker(body, marker_text) -> dict`` use
  ``choices[0]``. ``Reply.items`` is ``[{"role": "assistant", "content": ...}]`` plus
  ``tool_calls`` and ``refusal`` when present, identical for streamed and
  non-streamed replies.
* ``StreamObserver(marker_text=None)``: ``feed(chunk) -> bytes``, ``result() -> Reply``
  and ``flush() -> bytes``. The marker is injected once as a chunk with
  ``delta: {"content": marker}`` for choice 0, just before the first chunk in which
  choice 0 has a ``finish_reason`` (or before ``data: [DONE]`` if none had one).
  ``Reply.complete`` is true once ``data: [DONE]`` was seen.
* ``error_body(status, message) -> dict`` / ``stream_error(message) -> bytes``
  (``data: {"error": {...}}``, which the openai SDK raises as ``APIError``).

``Reply.tool_calls`` entries are ``{"id", "name", "arguments"}`` (arguments: JSON text).

Pure: stdlib and ``orjson`` only; inputs are never mutated.
"""

from __future__ import annotations

from typing import Any

import orjson

from .marker import content_marker, content_strip, strip_markers
from .sse import Event, SSEParser
from .types import BlockKind, Exchange, Format, FormatError, Reply, Turn, Usage

FORMAT: Format = "openai_chat"

_SYSTEM_ROLES = ("system", "developer")
_TURN_ROLES = {"user": "user", "assistant": "assistant", "tool": "tool", "function": "tool"}
_PART_KINDS: dict[str, BlockKind] = {
    "text": "text",
    "refusal": "text",
    "image_url": "image",
    "file": "document",
    "input_audio": "other",
}
_SSE_FIELDS = (b"event:", b"data:", b"id:", b"retry:", b":")
_MAX_HOLD = 1 << 20  # never hold back more than this of an unfinished event
_CHUNK_KEYS = ("id", "object", "created", "model", "system_fingerprint", "service_tier")

_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("request_forbidden", None),
    404: ("invalid_request_error", None),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", None),
    504: ("server_error", "timeout"),
}


# --------------------------------------------------------------------------- request


def parse_request(body: Any, *, model: str | None = None, stream: bool | None = None) -> Exchange:
    """Parse a Chat Completions request body; raises ``FormatError`` if malformed."""
    if not isinstance(body, dict):
        raise FormatError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise FormatError("messages: field required and must be a list")
    turns: list[Turn] = []
    system: list[str] = []
    marker: str | None = None
    for index, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") in _SYSTEM_ROLES:
            system.append(_content_text(_checked_content(message, index)))
            continue
        turn, found = _parse_message(message, index)
        turns.append(turn)
        marker = found or marker
    tools = body.get("tools")
    return Exchange(
        format=FORMAT,
        model=model if model is not None else _model(body),
        stream=stream if stream is not None else body.get("stream") is True,
        system="\n".join(text for text in system if text),
        turns=turns,
        tools=[t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else [],
        body=body,
        marker=marker,
    )


def render_request(
    exchange: Exchange,
    *,
    items: list[dict[str, Any]] | None = None,
    system_block: str | None = None,
) -> dict[str, Any]:
    """The upstream body: system/developer messages, ``system_block``, then ``items``."""
    body = dict(exchange.body)
    original = body.get("messages")
    messages: list[Any] = [
        m
        for m in (original if isinstance(original, list) else [])
        if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES
    ]
    if system_block:
        messages.append({"role": "system", "content": system_block})
    messages.extend(items if items is not None else [t.item for t in exchange.turns])
    body["messages"] = messages
    return body


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise FormatError("model: must be a string")
    return model or ""


def _checked_content(message: dict[str, Any], index: int) -> Any:
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise FormatError(f"messages.{index}.content: must be a string, a list or null")
    if isinstance(content, list):
        for part_index, part in enumerate(content):
            if not isinstance(part, dict):
                raise FormatError(f"messages.{index}.content.{part_index}: must be an object")
    return content


def _parse_message(message: Any, index: int) -> tuple[Turn, str | None]:
    if not isinstance(message, dict):
        raise FormatError(f"messages.{index}: must be an object")
    role = message.get("role")
    if not isinstance(role, str) or role not in _TURN_ROLES:
        raise FormatError(
            f"messages.{index}.role: must be one of system, developer, user, assistant, tool"
        )
    content = _checked_content(message, index)
    marker = None
    if role == "assistant":
        marker = content_marker(content)
        if marker is not None:
            content = content_strip(content)
            message = {**message, "content": content}
    turn = Turn(role=_TURN_ROLES[role], item=message, text="")
    if turn.role == "tool":
        _fill_tool_turn(turn, message, content)
    else:
        _fill_turn(turn, message, content)
    return turn, marker


def _fill_turn(turn: Turn, message: dict[str, Any], content: Any) -> None:
    texts = [_content_text(content)]
    turn.kinds.extend(_content_kinds(content))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            turn.kinds.append("tool_call")
            if isinstance(call.get("id"), str):
                turn.tool_call_ids.append(call["id"])
            texts.append(_call_text(call.get("function")))
    if isinstance(message.get("function_call"), dict):
        turn.kinds.append("tool_call")
        texts.append(_call_text(message["function_call"]))
    if message.get("audio") is not None:
        turn.kinds.append("other")
    turn.text = "\n".join(text for text in texts if text)


def _fill_tool_turn(turn: Turn, message: dict[str, Any], content: Any) -> None:
    turn.kinds.append("tool_result")
    turn.kinds.extend(k for k in _content_kinds(content) if k not in ("text", "other"))
    if isinstance(message.get("tool_call_id"), str):
        turn.tool_result_ids.append(message["tool_call_id"])
    turn.text = _content_text(content)


def _call_text(function: Any) -> str:
    if not isinstance(function, dict):
        return ""
    name, arguments = function.get("name"), function.get("arguments")
    return f"{name if isinstance(name, str) else ''}({arguments if isinstance(arguments, str) else ''})"


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    key = {"text": "text", "refusal": "refusal"}.get(str(part.get("type")))
    value = part.get(key) if key else None
    return value if isinstance(value, str) else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text for text in map(_part_text, content) if text)
    return ""


def _content_kinds(content: Any) -> list[BlockKind]:
    if isinstance(content, str):
        return ["text"] if content else []
    if not isinstance(content, list):
        return []
    return [_PART_KINDS.get(str(part.get("type")), "other") for part in content]


# --------------------------------------------------------------------------- markers


# --------------------------------------------------------------------------- response


def parse_response(body: Any) -> Reply:
    """The assistant turn (choice 0), usage and model of a non-streaming response."""
    if not isinstance(body, dict):
        raise FormatError("response body must be a JSON object")
    if body.get("error"):
        return Reply(error=_error_message(body["error"]))
    choice = _first_choice(body.get("choices"))
    message = choice.get("message") if choice else None
    message = message if isinstance(message, dict) else {}
    calls = message.get("tool_calls")
    return _reply(
        content_strip(message.get("content")),
        tool_calls=[c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else [],
        refusal=message.get("refusal"),
        model=body.get("model"),
        stop_reason=choice.get("finish_reason") if choice else None,
        usage=body.get("usage"),
        complete=True,
    )


def add_marker(body: dict[str, Any], marker_text: str) -> dict[str, Any]:
    """A copy of ``body`` with ``marker_text`` appended to choice 0's content."""
    out = dict(body)
    choices = body.get("choices")
    choice = _first_choice(choices)
    if (
        choice is None
        or not isinstance(choices, list)
        or not isinstance(choice.get("message"), dict)
    ):
        return out
    message = dict(choice["message"])
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = content + marker_text
    elif isinstance(content, list):
        message["content"] = _append_to_parts(content, marker_text)
    else:
        message["content"] = marker_text
    out["choices"] = [{**c, "message": message} if c is choice else c for c in choices]
    return out


def _append_to_parts(parts: list[Any], marker_text: str) -> list[Any]:
    out = list(parts)
    for index in range(len(out) - 1, -1, -1):
        part = out[index]
        if isinstance(part, dict) and part.get("type") == "text":
            out[index] = {**part, "text": _part_text(part) + marker_text}
            return out
    out.append({"type": "text", "text": marker_text})
    return out


def _first_choice(choices: Any) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    dicts = [c for c in choices if isinstance(c, dict)]
    for choice in dicts:
        if choice.get("index", 0) == 0:
            return choice
    return dicts[0] if dicts else None


def _reply(
    content: Any,
    *,
    tool_calls: list[dict[str, Any]],
    refusal: Any,
    model: Any,
    stop_reason: Any,
    usage: Any,
    complete: bool,
    error: str = "",
) -> Reply:
    item: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        item["tool_calls"] = tool_calls
    if isinstance(refusal, str) and refusal:
        item["refusal"] = refusal
    return Reply(
        items=[item],
        text=_content_text(content),
        usage=_usage(usage),
        model=model if isinstance(model, str) else "",
        stop_reason=stop_reason if isinstance(stop_reason, str) else "",
        tool_calls=[_neutral_call(call) for call in tool_calls],
        complete=complete,
        error=error,
    )


def _neutral_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    return {
        "id": call.get("id") or "",
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
    }


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        cache_read = _int(details.get("cached_tokens"))
        cache_write = _int(details.get("cache_write_tokens"))
    else:  # DeepSeek-style OpenAI-compatible servers
        cache_read, cache_write = _int(usage.get("prompt_cache_hit_tokens")), 0
    return Usage(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        return str(error.get("type") or error.get("code") or "error")
    return str(error) if error else "error"


# --------------------------------------------------------------------------- errors


def error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI's JSON error body for an HTTP status the proxy returns itself."""
    default = ("invalid_request_error", None) if 400 <= status < 500 else ("server_error", None)
    error_type, code = _ERRORS.get(status, default)
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def stream_error(message: str) -> bytes:
    """A ``data: {"error": ...}`` event; the openai SDK raises it as ``APIError``."""
    return b"data: " + orjson.dumps(error_body(500, message)) + b"\n\n"


# --------------------------------------------------------------------------- streaming


def _load(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _may_hold(pending: bytes) -> bool:
    """Whether an unfinished event may be held back (it could be the finishing one)."""
    head = pending.lstrip(b"\r\n")[:6]
    if len(pending) > _MAX_HOLD:
        return False
    return any(f.startswith(head[: len(f)]) for f in _SSE_FIELDS)  # not a JSON error body


def _is_done(data: bytes) -> bool:
    return data.strip() == b"[DONE]"


def _finishes(chunk: dict[str, Any]) -> bool:
    """Whether choice 0 gets its ``finish_reason`` in this chunk."""
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice.get("finish_reason") is not None
    return False


def _marker_chunk(template: dict[str, Any], text: str) -> bytes:
    chunk = {key: template[key] for key in _CHUNK_KEYS if key in template}
    chunk.setdefault("object", "chat.completion.chunk")
    chunk["choices"] = [
        {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    ]
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class _ToolCall:
    __slots__ = ("id", "type", "name", "arguments")

    def __init__(self) -> None:
        self.id = ""
        self.type = ""
        self.name: list[str] = []
        self.arguments: list[str] = []

    def add(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("id"), str) and not self.id:
            self.id = delta["id"]
        if isinstance(delta.get("type"), str) and not self.type:
            self.type = delta["type"]
        function = delta.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                self.name.append(function["name"])
            if isinstance(function.get("arguments"), str):
                self.arguments.append(function["arguments"])

    def item(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type or "function",
            "function": {"name": "".join(self.name), "arguments": "".join(self.arguments)},
        }


class StreamObserver:
    """Watches a Chat Completions SSE stream; see the module docstring.

    ``feed`` returns the chunk object itself unless the marker is spliced into it.
    While the marker is still due and a chunk ends inside an event, that event's
    bytes are held back and sent with the next chunk (they may be the finishing
    chunk the marker goes before); ``flush()`` returns bytes still held when the
    upstream stream ends.
    """

    def __init__(self, marker_text: str | None = None) -> None:
        self._marker = marker_text or None
        self._parser = SSEParser()
        self._pos = 0  # stream offset just after the bytes fed so far
        self._held = b""
        self._held_start = 0
        self._template: dict[str, Any] = {}
        self._content: list[str] | None = None
        self._refusal: list[str] = []
        self._calls: dict[int, _ToolCall] = {}
        self._finish_reason = ""
        self._model = ""
        self._usage: Any = None
        self._complete = False
        self._error = ""

    def feed(self, chunk: bytes) -> bytes:
        events = self._parser.feed(chunk)
        if self._marker is None:
            self._pos += len(chunk)
            for event in events:
                self._handle(event.data, None)
            return chunk
        return self._splice(chunk, events)

    def flush(self) -> bytes:
        """Bytes held back at the end of the stream (an unterminated event)."""
        held, self._held = self._held, b""
        return held

    @property
    def complete(self) -> bool:
        """The final event has been fed: the reply is whole."""
        return self._complete

    def result(self) -> Reply:
        content = None if self._content is None else strip_markers("".join(self._content))
        return _reply(
            content,
            tool_calls=[self._calls[index].item() for index in sorted(self._calls)],
            refusal="".join(self._refusal),
            model=self._model,
            stop_reason=self._finish_reason,
            usage=self._usage,
            complete=self._complete,
            error=self._error,
        )

    def _splice(self, chunk: bytes, events: list[Event]) -> bytes:
        start = self._held_start if self._held else self._pos
        out = self._held + chunk if self._held else chunk
        self._held = b""
        self._pos += len(chunk)
        for event in events:
            done = _is_done(event.data)
            data = {} if done else _load(event.data)
            if self._marker is not None and (done or _finishes(data)):
                cut = (event.start if event.start >= start else event.end) - start
                marker = _marker_chunk(data or self._template, self._marker)
                out = out[:cut] + marker + out[cut:]
                self._marker = None
            self._handle(event.data, data)
        pending = self._parser.pending
        pending_start = self._pos - len(pending)
        if self._marker is not None and pending and pending_start >= start and _may_hold(pending):
            self._held, self._held_start = pending, pending_start
            return out[: len(out) - len(pending)]
        return out

    def _handle(self, data: bytes, chunk: dict[str, Any] | None) -> None:
        if _is_done(data):
            self._complete = True
            return
        if chunk is None:
            chunk = _load(data)
        if chunk.get("error"):
            self._error = _error_message(chunk["error"])
            return
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices:
            self._template = chunk
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if isinstance(choice.get("finish_reason"), str):
            self._finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            if self._content is None:
                self._content = []
            self._content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            if isinstance(call, dict):
                index = call.get("index", position)
                key = index if isinstance(index, int) else position
                self._calls.setdefault(key, _ToolCall()).add(call)
