"""Adapter for the Gemini API (``models/{model}:generateContent`` and
``:streamGenerateContent``).

Implements the adapter contract of ``types.py``:

* ``parse_request(body, *, model=None, stream=None) -> Exchange``: ``model`` and
  ``stream`` come from the URL. Each ``contents`` entry is one ``Turn`` (but see
  consecutive model contents below): role "user", "assistant" for ``model``, "tool"
  for the legacy ``function`` role; a user content holding ``functionResponse``
  parts stays "user" with ``tool_result_ids``.
  Field names are read in camelCase or snake_case, as the API accepts both.
  Function calls without an ``id`` get ``"{name}#{k}"`` (``k``: ordinal of the call
  among the calls of that name in its own content, so the id, and the turn's hash,
  are the same whether the turn is parsed in a request or alone from a reply); a
  ``functionResponse`` without ``id`` takes the id of the earliest unanswered call of
  the same name in the latest model content with calls. Markers are stripped from
  the model's (non-thought) text parts; a part left empty is dropped, and a model
  content left with no parts (one that only held a marker) is not a turn at all
  (Gemini rejects empty text parts). Consecutive model contents are one turn whose
  item has their parts, consecutive text pieces joined (as ``Reply.items`` of a
  stream has them): google-genai's chat helper keeps and resends one model content
  per streamed chunk, and this way its history hashes like the stored reply.
  ``Exchange.system`` is the text of ``systemInstruction``.
* ``render_request(exchange, *, items=None, system_block=None) -> dict``: a shallow
  copy of the body with ``contents`` replaced; by default with the client's own
  contents, markers stripped and marker-only contents left out (so contents
  coalesced into one turn still go upstream as the client sent them).
  ``system_block`` is added as a new text part (after a blank line) at the end of
  ``systemInstruction`` (or ``system_instruction`` if the client used that
  spelling). A request with ``cachedContent`` may not set a system instruction, so
  there the block goes into a user content put first in ``contents``.
* ``parse_response(body) -> Reply`` / ``add_marker(body, marker_text) -> dict``:
  ``Reply.items`` is ``[candidates[0].content]`` (role "model"), or ``[]`` if it has no
  parts. ``add_marker`` appends to the last non-thought text part of
  ``candidates[0]``, or adds a text part.
* ``StreamObserver(marker_text=None)``: ``feed(chunk) -> bytes``, ``flush() -> bytes``,
  ``result() -> Reply`` and ``injected``. With ``alt=sse`` the marker is sent once as
  an extra ``data:`` chunk whose candidate holds one text part (role "model"): just
  before the terminal chunk (the first with a ``finishReason`` other than
  ``CONTINUATION``), unless that chunk itself carries visible text; then just after
  it, repeating its ``finishReason`` and ``usageMetadata`` so the last chunk still
  carries them and the marker still ends the text. While the marker is due, the bytes
  of an unfinished event are held back until the event is complete (``flush()``
  returns them if the upstream stream ends inside an event). A JSON-array stream (no
  ``alt=sse``: the first non-blank byte is ``[``) is passed through untouched; its
  bytes are kept and parsed once by ``result()`` (the complete elements only, if the
  array was cut short). ``Reply.items`` from a stream is one
  model content whose consecutive text parts (same ``thought`` flag, the earlier one
  without a signature) are concatenated, as the non-streaming response has them.
* ``error_body(status, message) -> dict`` / ``stream_error(message) -> bytes``.

``Reply.tool_calls`` entries are ``{"id", "name", "arguments"}`` (``arguments``: JSON
text of ``args``; ``id`` as in requests). ``Reply.stop_reason`` is ``finishReason`` (or
``promptFeedback.blockReason``). Usage: input = ``promptTokenCount`` +
``toolUsePromptTokenCount``, cache read = ``cachedContentTokenCount``, output =
``candidatesTokenCount`` + ``thoughtsTokenCount``.

Pure: stdlib and ``orjson`` only; inputs are never mutated.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from .marker import find_marker, strip_markers
from .sse import Event, SSEParser
from .types import BlockKind, Exchange, Format, FormatError, Reply, Turn, Usage

FORMAT: Format = "gemini"

_ROLES = {"user": "user", "model": "assistant", "function": "tool"}
_MERGEABLE = frozenset({"text", "thought", "thoughtSignature", "thought_signature"})
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_NOT_TERMINAL = ("CONTINUATION",)
_SEPARATORS = re.compile(r"[\s,]*")

_STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _get(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]`` under its camelCase name or its snake_case spelling."""
    if name in obj:
        return obj[name]
    return obj.get(_CAMEL.sub("_", name).lower())


# --------------------------------------------------------------------------- request


class _CallIds:
    """Ids for function calls and the responses that answer them.

    A call without ``id`` is ``"{name}#{k}"``, ``k`` counting the calls of that name
    in its own content, so the id does not depend on the rest of the history (the
    same turn hashes alike whether parsed in a request or alone from a reply). A
    response without ``id`` takes the id of the earliest unanswered call of the same
    name in the latest model content with calls, else ``"{name}#{k}"`` likewise.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._open: dict[str, list[str]] = {}
        self._model = False  # in a model content whose first call is still to come

    def start(self, role: str) -> None:
        """Begin a new content (a model content with calls replaces the open calls)."""
        self._seen = {}
        self._model = role == "assistant"

    def call(self, call: dict[str, Any]) -> str:
        if self._model:
            self._open, self._model = {}, False
        name = _str(call.get("name"))
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = self._ordinal(name)
        self._open.setdefault(name, []).append(call_id)
        return call_id

    def result(self, response: dict[str, Any]) -> str:
        name = _str(response.get("name"))
        pending = self._open.get(name, [])
        response_id = response.get("id")
        if isinstance(response_id, str) and response_id:
            if response_id in pending:
                pending.remove(response_id)
            return response_id
        return pending.pop(0) if pending else self._ordinal(name)

    def _ordinal(self, name: str) -> str:
        k = self._seen.get(name, 0)
        self._seen[name] = k + 1
        return f"{name}#{k}"


def parse_request(body: Any, *, model: str | None = None, stream: bool | None = None) -> Exchange:
    """Parse a generateContent request body; raises ``FormatError`` if it is malformed."""
    if not isinstance(body, dict):
        raise FormatError("request body must be a JSON object")
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise FormatError("contents: field required and must be a list")
    kept: list[tuple[dict[str, Any], str]] = []
    marker: str | None = None
    for index, content in enumerate(contents):
        stripped, role, found = _stripped_content(content, index)
        marker = found or marker
        if stripped is not None:
            kept.append((stripped, role))
    ids = _CallIds()
    turns = [_content_turn(content, role, ids) for content, role in _coalesced(kept)]
    tools = body.get("tools")
    body_model = body.get("model")
    return Exchange(
        format=FORMAT,
        model=model if model is not None else _str(body_model),
        stream=bool(stream),
        system=_system_text(_get(body, "systemInstruction")),
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
    """The upstream body: ``exchange.body`` with ``contents`` (and the system) replaced."""
    body = dict(exchange.body)
    contents = list(items) if items is not None else _client_contents(body.get("contents"))
    if system_block and _get(body, "cachedContent"):
        contents.insert(0, {"role": "user", "parts": [{"text": system_block}]})
    elif system_block:
        snake = "system_instruction" in body and "systemInstruction" not in body
        key = "system_instruction" if snake else "systemInstruction"
        body[key] = _with_system_block(body.get(key), system_block)
    body["contents"] = contents
    return body


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if not isinstance(system, dict):
        raise FormatError("systemInstruction: must be a Content object")
    parts = system.get("parts")
    if not isinstance(parts, list):
        return ""
    return "\n".join(t for t in (_text(p) for p in parts) if t)


def _with_system_block(system: Any, text: str) -> dict[str, Any]:
    if isinstance(system, str) and system:
        return {"parts": [{"text": system}, {"text": f"\n\n{text}"}]}
    if isinstance(system, dict) and isinstance(system.get("parts"), list) and system["parts"]:
        return {**system, "parts": [*system["parts"], {"text": f"\n\n{text}"}]}
    if isinstance(system, dict):
        return {**system, "parts": [{"text": text}]}
    return {"parts": [{"text": text}]}


def _stripped_content(content: Any, index: int) -> tuple[dict[str, Any] | None, str, str | None]:
    """The content checked and without markers (None if it held only a marker),
    its turn role and the last marker found in it."""
    if not isinstance(content, dict):
        raise FormatError(f"contents.{index}: must be an object")
    role = _ROLES.get(content.get("role") or "user")
    if role is None:
        raise FormatError(f"contents.{index}.role: must be 'user' or 'model'")
    parts = content.get("parts", [])
    if not isinstance(parts, list):
        raise FormatError(f"contents.{index}.parts: must be a list")
    for part_index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise FormatError(f"contents.{index}.parts.{part_index}: must be an object")
    if role != "assistant":
        return content, role, None
    stripped, marker = _strip_parts(parts)
    if stripped is parts:
        return content, role, marker
    return ({**content, "parts": stripped} if stripped else None), role, marker


def _coalesced(
    contents: list[tuple[dict[str, Any], str]],
) -> list[tuple[dict[str, Any], str]]:
    """Consecutive model contents as one, their text pieces joined as a reply has them.

    google-genai's chat keeps one model content per streamed chunk and resends them
    all; the stored reply is one content. Coalesced, both are the same turn.
    """
    groups: list[tuple[list[dict[str, Any]], str]] = []
    for content, role in contents:
        if groups and role == "assistant" and groups[-1][1] == "assistant":
            groups[-1][0].append(content)
        else:
            groups.append(([content], role))
    return [
        (group[0], role)
        if len(group) == 1
        else (
            {**group[0], "parts": _merge_parts([p for c in group for p in c.get("parts", [])])},
            role,
        )
        for group, role in groups
    ]


def _client_contents(contents: Any) -> list[Any]:
    """The client's own contents, markers stripped (marker-only ones left out)."""
    stripped = (_stripped_content(c, i)[0] for i, c in enumerate(contents or []))
    return [content for content in stripped if content is not None]


def _content_turn(content: dict[str, Any], role: str, ids: _CallIds) -> Turn:
    turn = Turn(role=role, item=content, text="")
    ids.start(role)
    texts = [_add_part(turn, part, ids) for part in content.get("parts", [])]
    turn.text = "\n".join(t for t in texts if t)
    return turn


def _add_part(turn: Turn, part: dict[str, Any], ids: _CallIds) -> str:
    """Record the part's kind and ids on ``turn``; return its text."""
    call, response = _get(part, "functionCall"), _get(part, "functionResponse")
    media = _get(part, "inlineData") or _get(part, "fileData")
    if isinstance(part.get("text"), str):
        turn.kinds.append("thinking" if part.get("thought") else "text")
        return "" if part.get("thought") else str(part["text"])
    if isinstance(call, dict):
        turn.kinds.append("tool_call")
        turn.tool_call_ids.append(ids.call(call))
        return f"{_str(call.get('name'))}({_dumps(call.get('args', {}))})"
    if isinstance(response, dict):
        turn.kinds.append("tool_result")
        turn.tool_result_ids.append(ids.result(response))
        value = response.get("response")
        return value if isinstance(value, str) else _dumps(value if value is not None else {})
    turn.kinds.append(_media_kind(media) if isinstance(media, dict) else "other")
    return ""


def _media_kind(media: dict[str, Any]) -> BlockKind:
    mime = _str(_get(media, "mimeType"))
    if mime.startswith("image/"):
        return "image"
    if mime == "application/pdf" or mime.startswith("text/"):
        return "document"
    return "other"


def _text(part: Any) -> str:
    """The visible text of a part (not a thought)."""
    if not isinstance(part, dict) or part.get("thought"):
        return ""
    text = part.get("text")
    return text if isinstance(text, str) else ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------- markers


def _strip_parts(parts: list[Any]) -> tuple[list[Any], str | None]:
    """``parts`` without markers (the same list if there were none), and the last marker."""
    marker: str | None = None
    out: list[Any] = []
    changed = False
    for part in parts:
        text = _text(part)
        if "<!-- vc:" not in text:
            out.append(part)
            continue
        marker = find_marker(text) or marker
        stripped = strip_markers(text)
        changed = changed or stripped != text
        if stripped or set(part) != {"text"}:
            out.append({**part, "text": stripped})
    return (out if changed else parts), marker


# --------------------------------------------------------------------------- response


def parse_response(body: Any) -> Reply:
    """The model turn, usage and model version of a non-streaming response."""
    if not isinstance(body, dict):
        raise FormatError("response body must be a JSON object")
    if body.get("error"):
        return Reply(error=_error_message(body["error"]))
    candidate = _candidate(body)
    content = candidate.get("content") if candidate else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return _reply(
        content if isinstance(content, dict) else {},
        parts if isinstance(parts, list) else [],
        body,
        complete=True,
    )


def add_marker(body: dict[str, Any], marker_text: str) -> dict[str, Any]:
    """A copy of ``body`` with ``marker_text`` appended to the model's last text part."""
    out = dict(body)
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return out
    candidate = candidates[0]
    content = candidate.get("content")
    content = content if isinstance(content, dict) else {"role": "model"}
    parts = list(content.get("parts") or [])
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
            parts[index] = {**part, "text": part["text"] + marker_text}
            break
    else:
        parts.append({"text": marker_text})
    out["candidates"] = [{**candidate, "content": {**content, "parts": parts}}, *candidates[1:]]
    return out


def _candidate(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first candidate (``index`` 0 or absent)."""
    candidates = body.get("candidates")
    if not isinstance(candidates, list):
        return None
    for candidate in candidates:
        if isinstance(candidate, dict) and candidate.get("index", 0) == 0:
            return candidate
    return None


def _reply(
    content: dict[str, Any],
    parts: list[Any],
    response: dict[str, Any],
    *,
    complete: bool,
    error: str = "",
) -> Reply:
    parts, _ = _strip_parts(parts)
    dict_parts = [p for p in parts if isinstance(p, dict)]
    calls = [c for c in (_get(p, "functionCall") for p in dict_parts) if isinstance(c, dict)]
    ids = _CallIds()
    ids.start("assistant")
    return Reply(
        items=[{**content, "role": content.get("role") or "model", "parts": parts}]
        if parts
        else [],
        text="\n".join(t for t in (_text(p) for p in dict_parts) if t),
        usage=_usage(_get(response, "usageMetadata")),
        model=_str(_get(response, "modelVersion")),
        stop_reason=_stop_reason(response),
        tool_calls=[
            {
                "id": ids.call(call),
                "name": _str(call.get("name")),
                "arguments": _dumps(call.get("args", {})),
            }
            for call in calls
        ],
        complete=complete,
        error=error,
    )


def _stop_reason(response: dict[str, Any]) -> str:
    candidate = _candidate(response)
    reason = _get(candidate, "finishReason") if candidate else None
    if isinstance(reason, str):
        return reason
    feedback = _get(response, "promptFeedback")
    return _str(_get(feedback, "blockReason")) if isinstance(feedback, dict) else ""


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    return Usage(
        input_tokens=_int(_get(usage, "promptTokenCount"))
        + _int(_get(usage, "toolUsePromptTokenCount")),
        output_tokens=_int(_get(usage, "candidatesTokenCount"))
        + _int(_get(usage, "thoughtsTokenCount")),
        cache_read_tokens=_int(_get(usage, "cachedContentTokenCount")),
    )


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        return str(error.get("status") or error.get("code") or "error")
    return str(error) if error else "error"


# --------------------------------------------------------------------------- errors


def error_body(status: int, message: str) -> dict[str, Any]:
    """Google's JSON error body for an HTTP status the proxy returns itself."""
    default = "INVALID_ARGUMENT" if status < 500 else "INTERNAL"
    return {"error": {"code": status, "message": message, "status": _STATUSES.get(status, default)}}


def stream_error(message: str) -> bytes:
    """A ``data: {"error": ...}`` event; google-genai raises ``APIError`` on it."""
    payload = {"error": {"code": 500, "message": message, "status": "INTERNAL"}}
    return b"data: " + orjson.dumps(payload) + b"\r\n\r\n"


# --------------------------------------------------------------------------- streaming


def _load(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _merge_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Streamed parts with consecutive text pieces concatenated."""
    merged: list[dict[str, Any]] = []
    for part in parts:
        previous = merged[-1] if merged else None
        if previous is not None and _can_merge(previous, part):
            merged[-1] = {**previous, **part, "text": previous["text"] + part["text"]}
        else:
            merged.append(part)
    return merged


def _can_merge(first: dict[str, Any], second: dict[str, Any]) -> bool:
    return (
        isinstance(first.get("text"), str)
        and isinstance(second.get("text"), str)
        and set(first) <= {"text", "thought"}
        and set(second) <= _MERGEABLE
        and bool(first.get("thought")) == bool(second.get("thought"))
    )


def _is_terminal(chunk: dict[str, Any]) -> bool:
    candidate = _candidate(chunk)
    reason = _get(candidate, "finishReason") if candidate else None
    return isinstance(reason, str) and reason not in _NOT_TERMINAL


def _has_visible_text(chunk: dict[str, Any]) -> bool:
    candidate = _candidate(chunk) or {}
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and any(_text(p) for p in parts)


class _Accumulator:
    """The model turn built from the chunks of one stream."""

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []
        self.last: dict[str, Any] = {}
        self.usage: Any = None
        self.finish: dict[str, Any] = {}
        self.complete = False
        self.error = ""

    def add(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error"):
            self.error = _error_message(chunk["error"])
            return
        candidate = _candidate(chunk)
        content = candidate.get("content") if candidate else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            self.parts.extend(p for p in parts if isinstance(p, dict))
        if _get(chunk, "usageMetadata") is not None:
            self.usage = _get(chunk, "usageMetadata")
        reason = _stop_reason(chunk)
        if reason and reason not in _NOT_TERMINAL:
            self.finish = chunk
            self.complete = True
        self.last = chunk

    def reply(self) -> Reply:
        response = {
            "candidates": self.finish.get("candidates", []),
            "promptFeedback": _get(self.finish, "promptFeedback"),
            "usageMetadata": self.usage,
            "modelVersion": _get(self.last, "modelVersion") or _get(self.finish, "modelVersion"),
        }
        content = {"role": "model"}
        return _reply(
            content, _merge_parts(self.parts), response, complete=self.complete, error=self.error
        )


def _parse_array(data: bytes) -> list[Any]:
    """The elements of a JSON-array stream; the complete ones if it was cut short."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    else:
        return value if isinstance(value, list) else [value]
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    elements: list[Any] = []
    pos = text.find("[") + 1
    while pos > 0:
        separators = _SEPARATORS.match(text, pos)
        pos = separators.end() if separators else pos
        try:
            element, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        elements.append(element)
    return elements


class StreamObserver:
    """Watches a streamGenerateContent response; see the module docstring.

    ``feed`` returns the chunk object itself unless the marker is spliced into it or
    the bytes of an unfinished event are held back (only while the marker is due).
    """

    def __init__(self, marker_text: str | None = None) -> None:
        self._marker = marker_text or None
        self.injected = False
        self._mode: str | None = None  # "sse" or "json" once the first bytes are seen
        self._raw: list[bytes] = []
        self._parser = SSEParser()
        self._acc = _Accumulator()
        self._pos = 0
        self._held = b""
        self._held_start = 0

    def feed(self, chunk: bytes) -> bytes:
        if self._mode is None and chunk.strip():
            self._mode = "json" if chunk.lstrip()[:1] == b"[" else "sse"
        if self._mode == "json":
            self._raw.append(chunk)
            held, self._held = self._held, b""
            return held + chunk if held else chunk
        events = self._parser.feed(chunk)
        if self._marker is None and not self._held:
            self._pos += len(chunk)
            for event in events:
                self._acc.add(_load(event.data))
            return chunk
        return self._splice(chunk, events)

    def flush(self) -> bytes:
        """Bytes held back at the end of the stream (an unterminated event)."""
        held, self._held = self._held, b""
        return held

    @property
    def complete(self) -> bool:
        """The terminal chunk has been fed (SSE; a JSON array is read at the end)."""
        return self._mode == "sse" and self._acc.complete

    def result(self) -> Reply:
        if self._mode != "json":
            return self._acc.reply()
        acc = _Accumulator()
        for element in _parse_array(b"".join(self._raw)):
            if isinstance(element, dict):
                acc.add(element)
        return acc.reply()

    def _splice(self, chunk: bytes, events: list[Event]) -> bytes:
        start = self._held_start if self._held else self._pos
        out = self._held + chunk if self._held else chunk
        self._held = b""
        self._pos += len(chunk)
        for event in events:
            data = _load(event.data)
            if self._marker is not None and _is_terminal(data):
                out = self._inject(out, start, event, data, self._marker)
            self._acc.add(data)
        pending = self._parser.pending
        if self._marker is not None and pending and self._pos - len(pending) >= start:
            self._held, self._held_start = pending, self._pos - len(pending)
            return out[: len(out) - len(pending)]
        return out

    def _inject(
        self, out: bytes, start: int, event: Event, data: dict[str, Any], marker: str
    ) -> bytes:
        """``out`` with the marker chunk spliced in before (or after) ``event``."""
        after = _has_visible_text(data) or event.start < start
        raw = out[max(event.start - start, 0) : event.end - start]
        newline = b"\r\n" if raw.endswith(b"\r\n") else b"\r" if raw.endswith(b"\r\r") else b"\n"
        blob = b"data: " + orjson.dumps(_marker_chunk(data, marker, after)) + newline * 2
        cut = (event.end if after else event.start) - start
        self._marker = None
        self.injected = True
        return out[:cut] + blob + out[cut:]


def _marker_chunk(terminal: dict[str, Any], marker: str, after: bool) -> dict[str, Any]:
    """A chunk holding ``marker`` as its only text part, modelled on the terminal chunk."""
    source = _candidate(terminal) or {}
    candidate: dict[str, Any] = {"content": {"parts": [{"text": marker}], "role": "model"}}
    if after:
        candidate["finishReason"] = _get(source, "finishReason")
    if "index" in source:
        candidate["index"] = source["index"]
    chunk: dict[str, Any] = {"candidates": [candidate]}
    if after and _get(terminal, "usageMetadata") is not None:
        chunk["usageMetadata"] = _get(terminal, "usageMetadata")
    for key in ("modelVersion", "responseId"):
        if key in terminal:
            chunk[key] = terminal[key]
    return chunk
