"""Attaching the recall block to the latest user turn, per wire format, and
rendering a planned request (``planned_body``).

``recall_attach(format, items, text)`` returns a copy of the history items with
``text`` as the first content of the last user item (so everything before that
item stays byte-identical between requests: the provider's prompt cache keeps
its prefix). If the history ends without a user item (a tool result, say),
nothing is attached and the caller puts the text in the system position.
"""

from __future__ import annotations

from typing import Any

from .envelope import envelopes_strip
from .types import Format


def planned_body(adapter: Any, exchange: Any, plan: Any) -> dict[str, Any]:
    """The upstream body of ``exchange`` as ``plan`` (a ``PayloadPlan``) lays it
    out: the kept turns (channel envelopes taken out), the stable block after
    the client's system prompt, the recall block on the latest user turn (or in
    the system position when the history ends without one)."""
    items = [exchange.turns[i].item for i in plan.kept_positions]
    items = envelopes_strip(exchange.format, items) or items
    system = plan.stable_block
    attached = recall_attach(exchange.format, items, plan.recall_block)
    if attached is not None:
        items = attached
    elif plan.recall_block:
        system = f"{system}\n\n{plan.recall_block}" if system else plan.recall_block
    return adapter.render_request(exchange, items=items, system_block=system or None)  # type: ignore[no-any-return]


def recall_attach(
    format: Format, items: list[dict[str, Any]], text: str
) -> list[dict[str, Any]] | None:
    """``items`` with ``text`` prepended to the last user item, or ``None``."""
    if not text or not items:
        return None
    last = items[-1]
    attached = _ATTACH[format](last, text)
    if attached is None:
        return None
    return [*items[:-1], attached]


def _anthropic(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    if item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return None  # tool results must lead the message
    block = {"type": "text", "text": text}
    if isinstance(content, str):
        return {**item, "content": [block, {"type": "text", "text": content}]}
    if isinstance(content, list):
        return {**item, "content": [block, *content]}
    return None


def _openai_chat(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    if item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": f"{text}\n\n{content}"}
    if isinstance(content, list):
        return {**item, "content": [{"type": "text", "text": text}, *content]}
    return None


def _openai_responses(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    if item.get("role") != "user" or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": f"{text}\n\n{content}"}
    if isinstance(content, list):
        return {**item, "content": [{"type": "input_text", "text": text}, *content]}
    return None


def _gemini(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    parts = item.get("parts")
    if item.get("role", "user") != "user" or not isinstance(parts, list):
        return None
    if any(
        isinstance(p, dict) and ("functionResponse" in p or "function_response" in p) for p in parts
    ):
        return None
    return {**item, "parts": [{"text": text}, *parts]}


_ATTACH = {
    "anthropic": _anthropic,
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "gemini": _gemini,
}
