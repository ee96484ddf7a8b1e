"""Neutral shapes shared by the four wire-format adapters.

Contract of every adapter module (``proxy_app/formats/<format>.py``):

``parse_request(body, *, model=None, stream=None) -> Exchange``
    Parse a provider request body (already JSON-decoded) into an ``Exchange``.
    ``model``/``stream`` come from the URL for Gemini (``models/{m}:streamGenerateContent``)
    and are ``None`` elsewhere. Raises ``FormatError`` on a body the provider would
    reject as malformed (not a dict, messages not a list, ...). Session markers
    (``marker.py``) are stripped from assistant items in ``Exchange.turns[i].item``;
    the last marker token seen is put in ``Exchange.marker``. The original body is
    kept untouched in ``Exchange.body``.

``render_request(exchange, *, items=None, system_block=None) -> dict``
    Build the body to send upstream: a shallow copy of ``exchange.body`` (every
    field the proxy does not understand is kept as is) with the history replaced
    by ``items`` (verbatim provider items; default: the client's own items with
    the markers stripped, i.e. those of ``exchange.turns``, except that Gemini
    keeps the separate contents it coalesces into one turn) and, if
    ``system_block`` is given, that text added to the
    system position of the format (Anthropic ``system``, Chat system message,
    Responses ``instructions``, Gemini ``systemInstruction``) after the client's
    own system text, never removing the client's ``cache_control`` marks.

``parse_response(body) -> Reply``
    The assistant turn, usage and model of a non-streaming response.

``add_marker(body, marker_text) -> dict``
    A copy of a non-streaming response body with ``marker_text`` appended to the
    last text block of the assistant reply (or a new text block if it has none).

``StreamObserver(marker_text=None)``
    ``feed(chunk: bytes) -> bytes`` watches an SSE stream chunk by chunk (events may
    be split across chunks) and returns the bytes to send to the client: the
    chunk itself, or, once, the chunk with the marker spliced in as a final text
    delta just before the terminal event(s) when ``marker_text`` is set.
    ``result() -> Reply`` afterwards gives the assistant turn and the usage from
    the stream's final events; ``Reply.complete`` says whether the terminal event
    was seen.

``error_body(status, message) -> dict``
    The provider's JSON error shape for an HTTP status the proxy itself returns
    (400, 401, 404, 413, 429, 500, 502, 504).

``stream_error(message) -> bytes``
    The SSE bytes the provider sends when a stream fails mid-way.

Adapters are pure: no Django, HTTP or I/O imports; ``orjson`` for JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Format = Literal["anthropic", "openai_chat", "openai_responses", "gemini"]
FORMATS: tuple[Format, ...] = ("anthropic", "openai_chat", "openai_responses", "gemini")

# Kinds of content a turn can carry; used for token estimates and the viewer.
BlockKind = Literal["text", "image", "document", "tool_call", "tool_result", "thinking", "other"]


class FormatError(ValueError):
    """The body is not a valid request/response of this format."""


@dataclass(slots=True)
class Turn:
    """One history item exactly as the provider represents it.

    ``role`` is "user", "assistant" or "tool" (a tool result that the format sends
    as its own item: Chat ``role: tool``, Responses ``function_call_output``).
    ``item`` is the verbatim provider item (a message dict, a Responses input
    item, a Gemini ``Content``), with any session marker removed.
    ``text`` is its plain text for search and display: text blocks joined by
    newlines, tool calls as ``name(arguments-json)``, tool results as their text.
    """

    role: str
    item: dict[str, Any]
    text: str
    kinds: list[BlockKind] = field(default_factory=list)
    tool_call_ids: list[str] = field(default_factory=list)
    tool_result_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Exchange:
    format: Format
    model: str
    stream: bool
    system: str
    turns: list[Turn]
    tools: list[dict[str, Any]]
    body: dict[str, Any]
    marker: str | None = None


@dataclass(slots=True)
class Usage:
    """Token usage normalised across providers.

    ``input_tokens`` is the whole prompt, cached parts included (Anthropic reports
    ``input_tokens`` without cache reads/writes: the adapter adds them).
    ``cache_read_tokens`` and ``cache_write_tokens`` are subsets of it.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(slots=True)
class Reply:
    """The assistant side of one exchange.

    ``items`` are the assistant turn(s) as the *request* format would resend them
    in history (Anthropic: one assistant message with its content blocks; Chat:
    the assistant message incl. ``tool_calls``; Responses: the output items;
    Gemini: one ``Content`` with role ``model``).
    """

    items: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    stop_reason: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    error: str = ""
