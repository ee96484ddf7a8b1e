"""Adapter for the Anthropic Messages API (``POST /v1/messages``).

Implements the adapter contract of ``types.py``:

* ``parse_request(body, *, model=None, stream=None) -> Exchange``: one ``Turn`` per
  message (role "user"/"assistant"; a user message of ``tool_result`` blocks stays
  "user" with ``tool_result_ids``). Session markers are stripped from assistant text
  (string content or ``text`` blocks); a text block left empty by the stripping is
  dropped unless it was the only block. ``Exchange.system`` is the ``system`` string
  or its text blocks joined by newlines.
* ``render_request(exchange, *, items=None, system_block=None) -> dict``: a shallow
  copy of the body with ``messages`` replaced; ``system_block`` is appended as a new
  text block after the client's ``system`` (a string system becomes one text block;
  the client's blocks, ``cache_control`` included, are kept as they are).
* ``parse_response(body) -> Reply`` / ``add_marker(body, marker_text) -> dict``.
* ``StreamObserver(marker_text=None)``: ``feed(chunk) -> bytes``, ``result() -> Reply``
  and ``flush() -> bytes``. The marker is injected once as a complete new text block
  (``content_block_start``/``_delta``/``_stop``) just before ``message_delta`` (or
  ``message_stop`` if no ``message_delta`` came).
* ``error_body(status, message) -> dict`` / ``stream_error(message) -> bytes``.

``Reply.tool_calls`` entries are ``{"id", "name", "arguments"}`` with ``arguments`` the
JSON text of the tool input. ``Turn.kinds`` has one kind per content block, followed by
the kinds of images/documents nested in a ``tool_result``.

Pure: stdlib and ``orjson`` only; inputs are never mutated.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .marker import content_marker, content_strip
from .sse import Event, SSEParser
from .types import BlockKind, Exchange, Format, FormatError, Reply, Turn, Usage

FORMAT: Format = "anthropic"

_KINDS: dict[str, BlockKind] = {
    "text": "text",
    "image": "image",
    "document": "document",
    "tool_use": "tool_call",
    "server_tool_use": "tool_call",
    "mcp_tool_use": "tool_call",
    "tool_result": "tool_result",
    "thinking": "thinking",
    "redacted_thinking": "thinking",
}
_TOOL_CALL_TYPES = ("tool_use", "server_tool_use", "mcp_tool_use")
_INJECT_BEFORE = ("message_delta", "message_stop")
_LINE_SPLIT = re.compile(rb"\r\n|\n|\r")
_SSE_FIELDS = (b"event:", b"data:", b"id:", b"retry:", b":")
_MAX_HOLD = 1 << 20  # never hold back more than this of an unfinished event

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- request


def parse_request(body: Any, *, model: str | None = None, stream: bool | None = None) -> Exchange:
    """Parse a Messages request body; raises ``FormatError`` if it is malformed."""
    if not isinstance(body, dict):
        raise FormatError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise FormatError("messages: field required and must be a list")
    turns: list[Turn] = []
    marker: str | None = None
    for index, message in enumerate(messages):
        turn, found = _parse_message(message, index)
        turns.append(turn)
        marker = found or marker
    tools = body.get("tools")
    return Exchange(
        format=FORMAT,
        model=model if model is not None else _model(body),
        stream=stream if stream is not None else body.get("stream") is True,
        system=_system_text(body.get("system")),
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
    recall_blocks: int = 0,
) -> dict[str, Any]:
    """The upstream body: ``exchange.body`` with ``messages`` and ``system`` replaced.

    ``system_block`` (the stable memory block) goes after the client's system
    prompt. When the body then carries no ``cache_control`` mark at all, two
    go in: on that block (tools, system prompt and memory block change only at
    compaction) and on the last cacheable block of the latest message before
    its last ``recall_blocks`` blocks (what was recalled for it: the volatile
    tail). Every string content is then written as one text block, so that the
    next request, whose mark sits one message further on, repeats these
    messages byte for byte up to this mark. The client's own marks stay where
    they are, and none is added beside them (the API allows four)."""
    body = dict(exchange.body)
    body["messages"] = list(items) if items is not None else [t.item for t in exchange.turns]
    if system_block:
        marked = _cache_marks(body) == 0
        body["system"] = _with_system_block(body.get("system"), system_block, marked)
        if marked and body["messages"]:
            messages = [_as_blocks(m) for m in body["messages"]]
            messages[-1] = _cache_marked(messages[-1], skip=recall_blocks) or messages[-1]
            body["messages"] = messages
    return body


_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
_MARK = {"type": "ephemeral"}


def _as_blocks(message: Any) -> Any:
    """``message`` with a string content written as one text block."""
    if isinstance(message, dict) and isinstance(message.get("content"), str) and message["content"]:
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _cache_marked(message: Any, skip: int = 0) -> dict[str, Any] | None:
    """``message`` with a cache mark on its last cacheable block before its
    last ``skip`` blocks, or None."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return None
    content = message["content"]
    for i in range(len(content) - 1 - skip, -1, -1):
        block = content[i]
        if isinstance(block, dict) and block.get("type") in _CACHEABLE:
            marked = {**block, "cache_control": dict(_MARK)}
            return {**message, "content": [*content[:i], marked, *content[i + 1 :]]}
    return None


def _cache_marks(value: Any) -> int:
    """How many ``cache_control`` marks ``value`` carries (blocks, tools, messages)."""
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") else 0
        return own + sum(_cache_marks(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_cache_marks(v) for v in value)
    return 0


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise FormatError("model: must be a string")
    return model or ""


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise FormatError("system: must be a string or a list of text blocks")
    return "\n".join(_block_text(block) for block in system if isinstance(block, dict))


def _with_system_block(system: Any, text: str, mark: bool = False) -> list[Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark:
        block["cache_control"] = dict(_MARK)
    if isinstance(system, list):
        return [*system, block]
    if isinstance(system, str) and system:
        return [{"type": "text", "text": system}, block]
    return [block]


def _parse_message(message: Any, index: int) -> tuple[Turn, str | None]:
    if not isinstance(message, dict):
        raise FormatError(f"messages.{index}: must be an object")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise FormatError(f"messages.{index}.role: must be 'user' or 'assistant'")
    content = message.get("content")
    marker = None
    if role == "assistant":
        marker = content_marker(content)
        if marker is not None:
            content = content_strip(content)
            message = {**message, "content": content}
    if isinstance(content, str):
        return Turn(
            role=role, item=message, text=content, kinds=["text"] if content else []
        ), marker
    if not isinstance(content, list):
        raise FormatError(f"messages.{index}.content: must be a string or a list of blocks")
    turn = Turn(role=role, item=message, text="")
    texts: list[str] = []
    for block_index, block in enumerate(content):
        if not isinstance(block, dict):
            raise FormatError(f"messages.{index}.content.{block_index}: must be an object")
        _add_block(turn, texts, block)
    turn.text = "\n".join(t for t in texts if t)
    return turn, marker


def _add_block(turn: Turn, texts: list[str], block: dict[str, Any]) -> None:
    kind = _kind(block.get("type"))
    turn.kinds.append(kind)
    if kind == "text":
        texts.append(_block_text(block))
    elif kind == "tool_call":
        if isinstance(block.get("id"), str):
            turn.tool_call_ids.append(block["id"])
        texts.append(f"{block.get('name', '')}({_dumps(block.get('input', {}))})")
    elif kind == "tool_result":
        if isinstance(block.get("tool_use_id"), str):
            turn.tool_result_ids.append(block["tool_use_id"])
        content = block.get("content")
        texts.append(_result_text(content))
        if isinstance(content, list):
            turn.kinds.extend(
                k
                for k in (_kind(b.get("type")) for b in content if isinstance(b, dict))
                if k in ("image", "document")
            )


def _kind(block_type: Any) -> BlockKind:
    if not isinstance(block_type, str):
        return "other"
    if block_type in _KINDS:
        return _KINDS[block_type]
    return "tool_result" if block_type.endswith("_tool_result") else "other"


def _block_text(block: dict[str, Any]) -> str:
    text = block.get("text")
    return text if isinstance(text, str) and block.get("type") == "text" else ""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_block_text(b) for b in content if isinstance(b, dict) and _block_text(b))
    return ""


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------- markers


# --------------------------------------------------------------------------- response


def parse_response(body: Any) -> Reply:
    """The assistant turn, usage and model of a non-streaming Messages response."""
    if not isinstance(body, dict):
        raise FormatError("response body must be a JSON object")
    if body.get("type") == "error" or "error" in body:
        return Reply(error=_error_message(body.get("error")))
    content = body.get("content")
    blocks = content_strip(content) if isinstance(content, list) else []
    return _reply(
        blocks,
        model=body.get("model"),
        stop_reason=body.get("stop_reason"),
        usage=body.get("usage"),
        complete=True,
    )


def add_marker(body: dict[str, Any], marker_text: str) -> dict[str, Any]:
    """A copy of ``body`` with ``marker_text`` appended to the last text block."""
    out = dict(body)
    content = body.get("content")
    blocks = list(content) if isinstance(content, list) else []
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if isinstance(block, dict) and block.get("type") == "text":
            blocks[index] = {**block, "text": _block_text(block) + marker_text}
            break
    else:
        blocks.append({"type": "text", "text": marker_text})
    out["content"] = blocks
    return out


def _reply(
    blocks: list[Any], *, model: Any, stop_reason: Any, usage: Any, complete: bool, error: str = ""
) -> Reply:
    dict_blocks = [b for b in blocks if isinstance(b, dict)]
    return Reply(
        items=[{"role": "assistant", "content": blocks}],
        text="\n".join(_block_text(b) for b in dict_blocks if _block_text(b)),
        usage=_usage(usage),
        model=model if isinstance(model, str) else "",
        stop_reason=stop_reason if isinstance(stop_reason, str) else "",
        tool_calls=[
            {
                "id": b.get("id", ""),
                "name": b.get("name", ""),
                "arguments": _dumps(b.get("input", {})),
            }
            for b in dict_blocks
            if b.get("type") == "tool_use"
        ],
        complete=complete,
        error=error,
    )


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_write = _int(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_int(usage.get("input_tokens")) + cache_read + cache_write,
        output_tokens=_int(usage.get("output_tokens")),
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
        return str(error.get("type") or "error")
    return str(error) if error else "error"


# --------------------------------------------------------------------------- errors


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's JSON error body for an HTTP status the proxy returns itself."""
    error_type = _ERROR_TYPES.get(status)
    if error_type is None:
        error_type = "invalid_request_error" if 400 <= status < 500 else "api_error"
    return {"type": "error", "error": {"type": error_type, "message": message}}


def stream_error(message: str) -> bytes:
    """The ``error`` event Anthropic sends when a stream fails mid-way."""
    payload = {"type": "error", "error": {"type": "api_error", "message": message}}
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


# --------------------------------------------------------------------------- streaming


def _sse(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _marker_events(index: int, text: str) -> bytes:
    """A complete text block holding ``text``, as three stream events."""
    return (
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        )
        + _sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": text},
            },
        )
        + _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    )


def _pending_may_inject(pending: bytes) -> bool:
    """Whether an unfinished event could be one the marker goes before."""
    head = pending.lstrip(b"\r\n")[:6]
    if len(pending) > _MAX_HOLD or not any(f.startswith(head[: len(f)]) for f in _SSE_FIELDS):
        return False  # too big, or not SSE at all (e.g. a JSON error body)
    for line in _LINE_SPLIT.split(pending)[:-1]:  # complete lines only
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace") in _INJECT_BEFORE
    return True


def _load(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class StreamObserver:
    """Watches a Messages SSE stream; see the module docstring.

    ``feed`` returns the chunk object itself unless the marker is spliced into it.
    While the marker is still due and a chunk ends inside an event that may be the
    one to inject before, that event's bytes are held back and sent with the next
    chunk (``flush()`` returns bytes still held when the upstream stream ends).
    """

    def __init__(self, marker_text: str | None = None) -> None:
        self._marker = marker_text or None
        self._parser = SSEParser()
        self._pos = 0  # stream offset just after the bytes fed so far
        self._held = b""
        self._held_start = 0
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, dict[str, list[str]]] = {}
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason = ""
        self._complete = False
        self._error = ""

    def feed(self, chunk: bytes) -> bytes:
        events = self._parser.feed(chunk)
        if self._marker is None:
            self._pos += len(chunk)
            for event in events:
                self._handle(_load(event.data), event.name)
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
        blocks = [self._finished_block(index) for index in sorted(self._blocks)]
        return _reply(
            content_strip(blocks),
            model=self._message.get("model"),
            stop_reason=self._stop_reason,
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
            data = _load(event.data)
            name = data.get("type") or event.name
            if self._marker is not None and name in _INJECT_BEFORE:
                cut = (event.start if event.start >= start else event.end) - start
                out = out[:cut] + _marker_events(self._next_index(), self._marker) + out[cut:]
                self._marker = None
            self._handle(data, event.name)
        pending = self._parser.pending
        pending_start = self._pos - len(pending)
        if (
            self._marker is not None
            and pending
            and pending_start >= start
            and _pending_may_inject(pending)
        ):
            self._held, self._held_start = pending, pending_start
            return out[: len(out) - len(pending)]
        return out

    def _next_index(self) -> int:
        return max(self._blocks, default=-1) + 1

    def _handle(self, data: dict[str, Any], name: str) -> None:
        kind = data.get("type") or name
        if kind == "message_start":
            message = data.get("message")
            self._message = message if isinstance(message, dict) else {}
            usage = self._message.get("usage")
            self._usage = dict(usage) if isinstance(usage, dict) else {}
        elif kind == "content_block_start":
            block, index = data.get("content_block"), data.get("index")
            if isinstance(block, dict) and isinstance(index, int):
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            self._delta(data)
        elif kind == "message_delta":
            self._message_delta(data)
        elif kind == "message_stop":
            self._complete = True
        elif kind == "error":
            self._error = _error_message(data.get("error"))

    def _delta(self, data: dict[str, Any]) -> None:
        index, delta = data.get("index"), data.get("delta")
        if not isinstance(index, int) or index not in self._blocks or not isinstance(delta, dict):
            return
        block = self._blocks[index]
        kind = delta.get("type")
        field = {"text_delta": "text", "thinking_delta": "thinking"}.get(str(kind))
        if kind == "input_json_delta":
            field = "partial_json"
        if field is not None and isinstance(delta.get(field), str):
            self._parts.setdefault(index, {}).setdefault(field, []).append(delta[field])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = delta["signature"]
        elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
            citations = block.get("citations")
            block["citations"] = [*(citations or []), delta["citation"]]

    def _message_delta(self, data: dict[str, Any]) -> None:
        delta = data.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self._stop_reason = delta["stop_reason"]
        usage = data.get("usage")
        if isinstance(usage, dict):
            self._usage.update((k, v) for k, v in usage.items() if v is not None)

    def _finished_block(self, index: int) -> dict[str, Any]:
        block = dict(self._blocks[index])
        for field, parts in self._parts.get(index, {}).items():
            joined = "".join(parts)
            if field == "partial_json":
                try:
                    block["input"] = orjson.loads(joined) if joined.strip() else {}
                except orjson.JSONDecodeError:
                    block["input"] = joined
            else:
                previous = block.get(field)
                block[field] = (previous if isinstance(previous, str) else "") + joined
        return block
