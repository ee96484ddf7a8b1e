"""Adapter for the OpenAI Responses API (``POST /v1/responses``).

Implements the adapter contract of ``types.py``:

* ``parse_request(body, *, model=None, stream=None) -> Exchange``: every ``input``
  item is one ``Turn``: role "user" for user messages, "assistant" for assistant
  messages, ``function_call``/``custom_tool_call``/``reasoning`` and any other item
  the model produced, "tool" for ``function_call_output`` and the other ``*_output``
  items. A string ``input`` is one user turn whose item is
  ``{"role": "user", "content": input}``. System/developer messages in ``input`` are
  not turns: their text joins ``instructions`` in ``Exchange.system``. Markers are
  stripped from assistant message text (string content or ``output_text`` parts);
  a part left empty is dropped, and an assistant message left with no content (one
  that only held a marker, see ``add_marker``) is not a turn at all.
* ``render_request(exchange, *, items=None, system_block=None) -> dict``: a shallow
  copy of the body with ``input`` rebuilt from the turn items (a string ``input`` is
  kept as is when ``items`` is None; with ``items`` it becomes a list). The client's
  system/developer messages are put back: those before the first turn stay first,
  a later one keeps the number of turns that followed it (counted from the end,
  clamped), so re-rendering unchanged turns reproduces the client's order.
  ``system_block`` goes into ``instructions``, after the client's instructions and
  a blank line.
* ``parse_response(body) -> Reply`` / ``add_marker(body, marker_text) -> dict``:
  ``Reply.items`` are the ``output`` items (as a client resends them as input).
  ``add_marker`` appends to the last ``output_text`` part of the last assistant
  message, or adds a new message item at the end of ``output`` if there is none.
* ``StreamObserver(marker_text=None)``: ``feed(chunk) -> bytes``, ``flush() -> bytes``,
  ``result() -> Reply`` and ``injected`` (whether the marker went out).
* ``error_body(status, message) -> dict`` / ``stream_error(message) -> bytes``.

The marker in streams. Clients build the reply from different events: chat UIs
concatenate ``response.output_text.delta``; the openai SDK's ``responses.stream()``
returns ``response.completed``'s ``response.output`` from ``get_final_response()``
(checking it against the items it accumulated); Codex and the Agents SDK keep the
``response.output_item.done`` items. So the marker goes into all of them, where
``add_marker`` puts it in a non-streaming response:

- the response ends with a message's text part: the ``output_text.done``,
  ``content_part.done`` and ``output_item.done`` events that close that part are
  held back until the next event shows the response ends there
  (``response.completed`` or ``response.incomplete``); then one extra
  ``response.output_text.delta`` carrying the marker goes out before them, and
  they and the terminal event are re-serialised with the marker appended to the
  part's text. Any other event releases them unchanged at once;
- otherwise (the output ends with a tool call, or has no text): a complete
  message item of its own (``output_item.added`` … ``output_item.done``, id
  ``msg_vc_marker``) goes out just before the terminal event, which gets the
  item appended to its ``response.output``.

Events after an inserted one keep increasing ``sequence_number``s: those
re-serialised get theirs moved up by the number of events inserted. Only these
few closing events are ever rewritten; while the marker is due, an unfinished
event that may be one of them is held until it is complete (up to 16 MB: past
that the stream goes on without a marker). ``response.failed`` gets no marker.

``Reply.tool_calls`` entries are ``{"id", "name", "arguments"}`` (``call_id``, and the
arguments JSON text, or a custom tool's ``input``). ``Reply.stop_reason`` is
``incomplete_details.reason`` when present, else the response ``status``.

Pure: stdlib and ``orjson`` only; inputs are never mutated.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .marker import find_marker, strip_markers
from .sse import Event, SSEParser
from .types import BlockKind, Exchange, Format, FormatError, Reply, Turn, Usage

FORMAT: Format = "openai_responses"

_SYSTEM_ROLES = ("system", "developer")
_TEXT_PARTS = ("input_text", "output_text", "text")
_PART_KINDS: dict[str, BlockKind] = {
    "input_text": "text",
    "output_text": "text",
    "text": "text",
    "refusal": "text",
    "input_image": "image",
    "input_file": "document",
}
_CLIENT_CALLS = ("function_call", "custom_tool_call")
_MARKER_ITEM_ID = "msg_vc_marker"
_TERMINAL = ("response.completed", "response.incomplete")
_TEXT_DONE = "response.output_text.done"
_PART_CLOSING = ("response.content_part.done", "response.output_item.done")
_SSE_FIELDS = (b"event:", b"data:", b"id:", b"retry:", b":")
_LINE_SPLIT = re.compile(rb"\r\n|\n|\r")
# ``response.completed`` repeats the whole output (and the request's tools): an
# unfinished event that may need rewriting is held back up to this size.
_MAX_HOLD = 16 << 20

# status -> (error.type, error.code)
_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "server_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "service_unavailable"),
    504: ("server_error", "timeout"),
}


# --------------------------------------------------------------------------- request


def parse_request(body: Any, *, model: str | None = None, stream: bool | None = None) -> Exchange:
    """Parse a Responses request body; raises ``FormatError`` if it is malformed."""
    if not isinstance(body, dict):
        raise FormatError("request body must be a JSON object")
    entries, marker = _entries(body.get("input"))
    turns = [_turn(item, role) for item, role in entries if role is not None]
    system = [_instructions(body)] + [_message_text(i) for i, r in entries if r is None]
    tools = body.get("tools")
    return Exchange(
        format=FORMAT,
        model=model if model is not None else _model(body),
        stream=stream if stream is not None else body.get("stream") is True,
        system="\n\n".join(s for s in system if s),
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
    """The upstream body: ``exchange.body`` with ``input`` (and ``instructions``) replaced."""
    body = dict(exchange.body)
    source = body.get("input")
    if items is not None or isinstance(source, list):
        turn_items = list(items) if items is not None else [t.item for t in exchange.turns]
        entries = _entries(source)[0] if isinstance(source, list) else []
        body["input"] = _with_system_items(entries, turn_items)
    if system_block:
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            body["instructions"] = f"{instructions}\n\n{system_block}"
        else:
            body["instructions"] = system_block
    return body


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise FormatError("model: must be a string")
    return model or ""


def _instructions(body: dict[str, Any]) -> str:
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise FormatError("instructions: must be a string")
    return instructions or ""


def _entries(source: Any) -> tuple[list[tuple[dict[str, Any], str | None]], str | None]:
    """``(item, role)`` per input item (role None: system/developer message), markers
    stripped from assistant messages (marker-only ones left out), and the last marker."""
    if source is None:
        return [], None
    if isinstance(source, str):
        return [({"role": "user", "content": source}, "user")], None
    if not isinstance(source, list):
        raise FormatError("input: must be a string or a list of items")
    entries: list[tuple[dict[str, Any], str | None]] = []
    marker: str | None = None
    for index, item in enumerate(source):
        if not isinstance(item, dict):
            raise FormatError(f"input.{index}: must be an object")
        role = _item_role(item, index)
        if role == "assistant" and _is_message(item):
            stripped, found = _strip_message(item)
            marker = found or marker
            if stripped is None:
                continue
            item = stripped
        entries.append((item, role))
    return entries, marker


def _item_role(item: dict[str, Any], index: int) -> str | None:
    kind = item.get("type")
    if kind is None or kind == "message":
        role = item.get("role")
        if role in _SYSTEM_ROLES:
            return None
        if role in ("user", "assistant"):
            return str(role)
        raise FormatError(f"input.{index}.role: must be user, assistant, system or developer")
    if not isinstance(kind, str):
        raise FormatError(f"input.{index}.type: must be a string")
    if kind.endswith("_output") or kind == "mcp_approval_response":
        return "tool"
    return "assistant"


def _is_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and "role" in item


def _with_system_items(
    entries: list[tuple[dict[str, Any], str | None]], turn_items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``turn_items`` with the client's system/developer items put back in place."""
    total = sum(1 for _, role in entries if role is not None)
    at: dict[int, list[dict[str, Any]]] = {}
    seen = 0
    for item, role in entries:
        if role is not None:
            seen += 1
            continue
        position = 0 if seen == 0 else max(0, len(turn_items) - (total - seen))
        at.setdefault(position, []).append(item)
    out: list[dict[str, Any]] = []
    for index, turn_item in enumerate(turn_items):
        out.extend(at.get(index, ()))
        out.append(turn_item)
    out.extend(at.get(len(turn_items), ()))
    return out


# --------------------------------------------------------------------------- turns


def _turn(item: dict[str, Any], role: str) -> Turn:
    turn = Turn(role=role, item=item, text="")
    kind = item.get("type", "message")
    if kind == "message":
        turn.kinds.extend(_content_kinds(item.get("content")))
        turn.text = _message_text(item)
    elif kind == "reasoning":
        turn.kinds.append("thinking")
        turn.text = _reasoning_text(item)
    elif role == "tool":
        _result_turn(turn, item)
    elif isinstance(kind, str) and (kind.endswith("_call") or kind == "mcp_approval_request"):
        _call_turn(turn, item)
    else:
        turn.kinds.append("other")
    return turn


def _call_turn(turn: Turn, item: dict[str, Any]) -> None:
    turn.kinds.append("tool_call")
    # Only calls the client answers with an item of their own have an id to pair.
    call_id = item.get("id") if item.get("type") == "mcp_approval_request" else item.get("call_id")
    if isinstance(call_id, str):
        turn.tool_call_ids.append(call_id)
    name = item.get("name")
    if isinstance(name, str):
        arguments = item.get("arguments", item.get("input", ""))
        turn.text = f"{name}({arguments if isinstance(arguments, str) else _dumps(arguments)})"


def _result_turn(turn: Turn, item: dict[str, Any]) -> None:
    turn.kinds.append("tool_result")
    call_id = item.get("call_id", item.get("approval_request_id"))
    if isinstance(call_id, str):
        turn.tool_result_ids.append(call_id)
    output = item.get("output")
    if isinstance(output, str):
        turn.text = output
    elif isinstance(output, list):
        turn.text = _parts_text(output)
        turn.kinds.extend(k for k in _content_kinds(output) if k in ("image", "document"))
    elif output is not None:
        turn.text = _dumps(output)


def _content_kinds(content: Any) -> list[BlockKind]:
    if isinstance(content, str):
        return ["text"] if content else []
    if not isinstance(content, list):
        return []
    return [
        _PART_KINDS.get(str(part.get("type")), "other")
        for part in content
        if isinstance(part, dict)
    ]


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return _parts_text(content) if isinstance(content, list) else ""


def _parts_text(parts: list[Any]) -> str:
    return "\n".join(t for t in (_part_text(p) for p in parts) if t)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    value = part.get("refusal") if kind == "refusal" else part.get("text")
    return value if isinstance(value, str) and kind in (*_TEXT_PARTS, "refusal") else ""


def _reasoning_text(item: dict[str, Any]) -> str:
    texts: list[str] = []
    for key in ("summary", "content"):
        value = item.get(key)
        if isinstance(value, list):
            texts.extend(p["text"] for p in value if isinstance(p, dict) and _is_str(p.get("text")))
    return "\n".join(t for t in texts if t)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------- markers


def _strip_message(item: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The message without markers (None if nothing else was in it), and the last marker."""
    content = item.get("content")
    if isinstance(content, str):
        if "<!-- vc:" not in content:
            return item, None
        stripped = strip_markers(content)
        return ({**item, "content": stripped} if stripped else None), find_marker(content)
    if not isinstance(content, list):
        return item, None
    marker: str | None = None
    parts: list[Any] = []
    for part in content:
        text = part.get("text") if isinstance(part, dict) else None
        if (
            not isinstance(text, str)
            or "<!-- vc:" not in text
            or part.get("type") not in _TEXT_PARTS
        ):
            parts.append(part)
            continue
        marker = find_marker(text) or marker
        if stripped := strip_markers(text):
            parts.append({**part, "text": stripped})
    if len(parts) == len(content) and marker is None:
        return item, None
    return ({**item, "content": parts} if parts else None), marker


# --------------------------------------------------------------------------- response


def parse_response(body: Any) -> Reply:
    """The assistant turn, usage and model of a non-streaming Responses response."""
    if not isinstance(body, dict):
        raise FormatError("response body must be a JSON object")
    if body.get("error"):
        return Reply(error=_error_message(body["error"]), model=_str(body.get("model")))
    output = body.get("output")
    return _reply(
        output if isinstance(output, list) else [],
        response=body,
        complete=body.get("status", "completed") in ("completed", "incomplete"),
    )


def add_marker(body: dict[str, Any], marker_text: str) -> dict[str, Any]:
    """A copy of ``body`` with ``marker_text`` appended to the last ``output_text``."""
    out = dict(body)
    output = list(body.get("output") or [])
    for index in range(len(output) - 1, -1, -1):
        item = output[index]
        if isinstance(item, dict) and _is_message(item) and item.get("role") == "assistant":
            content = _with_marker(item.get("content"), marker_text)
            if content is not None:
                output[index] = {**item, "content": content}
                break
    else:
        output.append(_marker_item(marker_text))
    out["output"] = output
    if isinstance(body.get("output_text"), str):
        out["output_text"] = body["output_text"] + marker_text
    return out


def _marker_item(marker_text: str) -> dict[str, Any]:
    """An assistant message holding only the marker (for replies without text)."""
    return {
        "id": _MARKER_ITEM_ID,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": marker_text, "annotations": []}],
    }


def _with_marker(content: Any, marker_text: str) -> list[Any] | None:
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        part = content[index]
        if isinstance(part, dict) and part.get("type") == "output_text":
            text = part.get("text")
            parts = list(content)
            parts[index] = {**part, "text": (text if isinstance(text, str) else "") + marker_text}
            return parts
    return None


def _reply(
    output: list[Any], *, response: dict[str, Any], complete: bool, error: str = ""
) -> Reply:
    items: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if _is_message(item) and item.get("role") == "assistant":
            stripped, _ = _strip_message(item)
            if stripped is None:
                continue
            item = stripped
        items.append(item)
    texts = [_message_text(i) for i in items if _is_message(i)]
    return Reply(
        items=items,
        text="\n".join(t for t in texts if t),
        usage=_usage(response.get("usage")),
        model=_str(response.get("model")),
        stop_reason=_stop_reason(response),
        tool_calls=[_tool_call(i) for i in items if i.get("type") in _CLIENT_CALLS],
        complete=complete,
        error=error,
    )


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments", item.get("input", ""))
    return {
        "id": _str(item.get("call_id")),
        "name": _str(item.get("name")),
        "arguments": arguments if isinstance(arguments, str) else _dumps(arguments),
    }


def _stop_reason(response: dict[str, Any]) -> str:
    details = response.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        return str(details["reason"])
    return _str(response.get("status"))


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("input_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=cached,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        return str(error.get("code") or error.get("type") or "error")
    return str(error) if error else "error"


# --------------------------------------------------------------------------- errors


def error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI's JSON error body for an HTTP status the proxy returns itself."""
    default = ("invalid_request_error", None) if status < 500 else ("server_error", None)
    error_type, code = _ERRORS.get(status, default)
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def stream_error(message: str) -> bytes:
    """An ``error`` event for a stream that fails mid-way.

    The documented shape has ``code``/``message``/``param`` at the top level; the API
    actually nests them in ``error``, and the openai SDK raises ``APIError`` for an
    event whose data has a truthy ``error``: both are sent.
    """
    error = {"type": "server_error", "code": "server_error", "message": message, "param": None}
    payload = {
        "type": "error",
        "sequence_number": 0,
        "code": "server_error",
        "message": message,
        "param": None,
        "error": error,
    }
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


# --------------------------------------------------------------------------- streaming


def _load(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sse_event(named: bool, payload: dict[str, Any]) -> bytes:
    head = b"event: " + str(payload.get("type", "")).encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _has_event_line(raw: bytes) -> bool:
    return raw.lstrip(b"\r\n").startswith(b"event:") or any(
        sep + b"event:" in raw for sep in (b"\n", b"\r")
    )


def _pending_kind(pending: bytes) -> str | None:
    """The type of an unfinished event, once one of its complete lines tells it."""
    for line in _LINE_SPLIT.split(pending)[:-1]:
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace")
        if line.startswith(b"data:"):
            kind = _load(line[5:]).get("type")
            return kind if isinstance(kind, str) else ""
    return None


def _renumbered(data: dict[str, Any], shift: int) -> dict[str, Any]:
    number = data.get("sequence_number")
    if not shift or not isinstance(number, int) or isinstance(number, bool):
        return data
    return {**data, "sequence_number": number + shift}


def _item_marked(item: Any, content_index: Any, marker: str) -> Any:
    """``item`` with ``marker`` appended to its output_text part ``content_index``."""
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list) or not isinstance(content_index, int):
        return item
    if not 0 <= content_index < len(content):
        return item
    part = content[content_index]
    if not isinstance(part, dict) or part.get("type") != "output_text":
        return item
    parts = list(content)
    parts[content_index] = {**part, "text": _str(part.get("text")) + marker}
    return {**item, "content": parts}


def _response_marked(data: dict[str, Any], at: dict[str, Any], marker: str) -> dict[str, Any]:
    """A terminal event whose output has the marker in the part ``at`` names."""
    response = _dict(data.get("response"))
    output = response.get("output")
    if not isinstance(output, list):
        return data
    item_id, index = at.get("item_id"), at.get("output_index")
    marked = list(output)
    for position, item in enumerate(output):
        if isinstance(item, dict) and (item.get("id") == item_id if item_id else position == index):
            marked[position] = _item_marked(item, at.get("content_index"), marker)
            break
    response = {**response, "output": marked}
    if isinstance(response.get("output_text"), str):
        response["output_text"] += marker
    return {**data, "response": response}


def _marked(data: dict[str, Any], at: dict[str, Any], marker: str) -> dict[str, Any]:
    """A closing event of the marked text part (or the terminal one), marker included."""
    kind = data.get("type")
    if kind == _TEXT_DONE:
        return {**data, "text": _str(data.get("text")) + marker}
    if kind == "response.content_part.done":
        part = _dict(data.get("part"))
        if part.get("type") != "output_text":
            return data
        return {**data, "part": {**part, "text": _str(part.get("text")) + marker}}
    if kind == "response.output_item.done":
        return {**data, "item": _item_marked(data.get("item"), at.get("content_index"), marker)}
    return _response_marked(data, at, marker)


def _marker_item_events(index: int, marker: str, number: Any) -> list[dict[str, Any]]:
    """The events of a new message at ``output_index`` holding only the marker."""
    at = {"item_id": _MARKER_ITEM_ID, "output_index": index, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    item = _marker_item(marker)
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": part},
        {"type": "response.output_text.delta", **at, "delta": marker, "logprobs": []},
        {"type": _TEXT_DONE, **at, "text": marker, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": {**part, "text": marker}},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]
    if isinstance(number, int) and not isinstance(number, bool):
        events = [{**event, "sequence_number": number + n} for n, event in enumerate(events)]
    return events


class StreamObserver:
    """Watches a Responses SSE stream; see the module docstring.

    ``feed`` returns the chunk object itself when the marker is not (or no longer)
    due. While it is due, bytes go out event by event: an unfinished event that
    may need rewriting is held until it is complete, and the closing events of
    the latest message text part are held until the next event shows whether
    the response ends there. ``flush()`` returns whatever is still held when
    the upstream stream ends (unchanged: no marker then).
    """

    def __init__(self, marker_text: str | None = None) -> None:
        self._marker = marker_text or None
        self.injected = False
        self._parser = SSEParser()
        self._pos = 0  # stream offset after the bytes fed so far
        self._sent = 0  # stream offset up to which bytes were returned
        self._buf = b""  # the bytes from ``_sent`` on, not returned yet
        self._held: list[tuple[Event, dict[str, Any]]] = []
        self._shift = 0  # events added: later sequence numbers move up by this
        self._last_index = -1
        self._response: dict[str, Any] = {}
        self._final: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        self._done: set[int] = set()
        self._parts: dict[tuple[int, int], dict[str, Any]] = {}
        self._texts: dict[tuple[int, int], list[str]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._error = ""

    def feed(self, chunk: bytes) -> bytes:
        events = self._parser.feed(chunk)
        self._pos += len(chunk)
        if self._marker is None and not self._shift and not self._buf:
            self._sent = self._pos
            for event in events:
                data = _load(event.data)
                self._handle(str(data.get("type") or event.name), data)
            return chunk
        self._buf += chunk
        out: list[bytes] = []
        for event in events:
            data = _load(event.data)
            kind = str(data.get("type") or event.name)
            self._route(out, event, kind, data)
            self._handle(kind, data)
        out.append(self._take(self._release_point()))
        return b"".join(out)

    def flush(self) -> bytes:
        """Bytes still held when the upstream stream ends, as they came."""
        held, self._buf, self._held = self._buf, b"", []
        self._sent = self._pos
        return held

    @property
    def complete(self) -> bool:
        """The final response event has been fed: the reply is whole."""
        return self._final is not None and self._final.get("status") in ("completed", "incomplete")

    def result(self) -> Reply:
        final = self._final
        response = final if final is not None else self._response
        output = final.get("output") if final is not None else None
        if not isinstance(output, list) or (not output and self._items):
            output = [self._item(index) for index in sorted(self._items)]
        status = response.get("status")
        complete = final is not None and status in ("completed", "incomplete")
        return _reply(output, response=response, complete=complete, error=self._error)

    # ------------------------------------------------------------ splicing

    def _route(self, out: list[bytes], event: Event, kind: str, data: dict[str, Any]) -> None:
        """Pass, hold or rewrite one complete event while the marker is due."""
        if event.start < self._sent:  # its first bytes are out already: it stays as it is
            self._held = []
            if kind in _TERMINAL:
                self._marker = None
            return
        if self._held:
            if kind in _TERMINAL:
                self._inject_into_text(out, event, data)
                return
            if kind in _PART_CLOSING and data.get("output_index") == self._held[0][1].get(
                "output_index"
            ):
                self._held.append((event, data))
                return
            self._held = []  # more output follows: the held events go out unchanged
        if self._marker is None:
            if self._shift and "sequence_number" in data:
                self._replace(out, event, _renumbered(data, self._shift))
        elif kind == _TEXT_DONE and self._is_message(data.get("output_index")):
            out.append(self._take(event.start))
            self._held = [(event, data)]
        elif kind in _TERMINAL:
            self._inject_item(out, event, data)

    def _inject_into_text(self, out: list[bytes], terminal: Event, data: dict[str, Any]) -> None:
        """The marker as a last delta of the held text part; its closing events and
        the terminal event rewritten to end with it too."""
        marker = self._marker
        assert marker is not None
        first_event, first = self._held[0]
        names: tuple[str, ...] = ("item_id", "output_index", "content_index")
        at: dict[str, Any] = {k: first[k] for k in names if k in first}
        delta: dict[str, Any] = {
            "type": "response.output_text.delta",
            **at,
            "delta": marker,
            "logprobs": [],
        }
        if "sequence_number" in first:
            delta["sequence_number"] = first["sequence_number"]
        out.append(self._take(first_event.start))
        out.append(_sse_event(self._named(first_event), delta))
        self._shift = 1
        for event, payload in [*self._held, (terminal, data)]:
            self._replace(out, event, _renumbered(_marked(payload, at, marker), self._shift))
        self._held, self._marker, self.injected = [], None, True

    def _inject_item(self, out: list[bytes], terminal: Event, data: dict[str, Any]) -> None:
        """The marker as a message of its own just before the terminal event."""
        marker = self._marker
        assert marker is not None
        response = _dict(data.get("response"))
        output = response.get("output")
        last = len(output) - 1 if isinstance(output, list) else -1
        events = _marker_item_events(
            max(self._last_index, last) + 1, marker, data.get("sequence_number")
        )
        named = self._named(terminal)
        out.append(self._take(terminal.start))
        out.extend(_sse_event(named, event) for event in events)
        self._shift = len(events)
        if isinstance(output, list):
            response = {**response, "output": [*output, _marker_item(marker)]}
            if isinstance(response.get("output_text"), str):
                response["output_text"] += marker
            data = {**data, "response": response}
        self._replace(out, terminal, _renumbered(data, self._shift))
        self._marker, self.injected = None, True

    def _replace(self, out: list[bytes], event: Event, data: dict[str, Any]) -> None:
        named = self._named(event)
        out.append(self._take(event.start))
        out.append(_sse_event(named, data))
        self._take(event.end)

    def _named(self, event: Event) -> bool:
        """Whether ``event`` (still buffered) came with an ``event:`` line."""
        return _has_event_line(self._buf[event.start - self._sent : event.end - self._sent])

    def _take(self, end: int) -> bytes:
        """The buffered bytes before stream offset ``end``, removed from the buffer."""
        size = end - self._sent
        if size <= 0:
            return b""
        piece, self._buf = self._buf[:size], self._buf[size:]
        self._sent = end
        return piece

    def _release_point(self) -> int:
        """How far the bytes fed so far may go out now."""
        pending = self._parser.pending
        if self._held:
            if len(self._buf) <= _MAX_HOLD:
                return self._held[0][0].start
            self._held, self._marker = [], None  # too much to hold: no marker this time
            return self._pos
        if pending and self._may_hold(pending):
            return self._pos - len(pending)
        return self._pos

    def _may_hold(self, pending: bytes) -> bool:
        """Whether an unfinished event may be one to rewrite or to inject before."""
        if self._marker is None and not self._shift:
            return False
        head = pending.lstrip(b"\r\n")[:6]
        if len(pending) > _MAX_HOLD or not any(f.startswith(head[: len(f)]) for f in _SSE_FIELDS):
            return False  # too big, or not SSE at all (e.g. a JSON error body)
        kind = _pending_kind(pending)
        return kind is None or bool(self._shift) or kind in (_TEXT_DONE, *_TERMINAL)

    def _is_message(self, index: Any) -> bool:
        return isinstance(index, int) and self._items.get(index, {}).get("type") == "message"

    # ------------------------------------------------------------ observing

    def _handle(self, kind: str, data: dict[str, Any]) -> None:
        index = data.get("output_index")
        if isinstance(index, int) and not isinstance(index, bool):
            self._last_index = max(self._last_index, index)
        if kind in ("response.created", "response.in_progress", "response.queued"):
            self._response = _dict(data.get("response"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._final = _dict(data.get("response"))
            if kind == "response.failed":
                self._error = _error_message(self._final.get("error") or "response failed")
        elif kind == "error":
            self._error = _error_message(data.get("error") or data)
        elif not isinstance(index, int):
            return
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._items[index] = _dict(data.get("item"))
            if kind == "response.output_item.done":
                self._done.add(index)
        else:
            self._delta(kind, index, data)

    def _delta(self, kind: str, index: int, data: dict[str, Any]) -> None:
        part_index = data.get("content_index")
        delta = data.get("delta")
        if kind == "response.function_call_arguments.delta" and isinstance(delta, str):
            self._arguments.setdefault(index, []).append(delta)
        elif not isinstance(part_index, int):
            return
        elif kind == "response.content_part.added":
            self._parts[(index, part_index)] = _dict(data.get("part"))
        elif kind == "response.output_text.delta" and isinstance(delta, str):
            self._texts.setdefault((index, part_index), []).append(delta)

    def _item(self, index: int) -> dict[str, Any]:
        """A finished item, or one rebuilt from its deltas if the stream stopped early."""
        item = self._items[index]
        if index in self._done:
            return item
        item = dict(item)
        if item.get("type") == "message":
            keys = sorted(k for k in self._parts if k[0] == index)
            item["content"] = [
                {**self._parts[k], "text": "".join(self._texts.get(k, []))}
                if self._parts[k].get("type") == "output_text"
                else self._parts[k]
                for k in keys
            ]
        elif index in self._arguments:
            item["arguments"] = "".join(self._arguments[index])
        return item
