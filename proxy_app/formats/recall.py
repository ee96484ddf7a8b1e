"""Attaching the recall block to the latest user turn, per wire format, and
rendering a planned request (``planned_body``).

``recall_attach(format, items, text)`` returns a copy of the history items with
``text`` after the client's own content of the last item, when that item is the
user's: a message, or tool results (Anthropic: a text block after the
``tool_result`` blocks; OpenAI Chat and Responses: a user message after the
tool output). Everything before the block is then byte-identical to what the
next request resends — the user's message included — so the provider's prompt
cache keeps that whole prefix. It returns ``None`` when there is nowhere valid
to put it (a Gemini function response, an assistant turn last); the caller
then puts the text in the system position.
"""

from __future__ import annotations

from typing import Any

from .envelope import envelopes_strip
from .types import Format


def planned_body(adapter: Any, exchange: Any, plan: Any) -> dict[str, Any]:
    """The upstream body of ``exchange`` as ``plan`` (a ``PayloadPlan``) lays it
    out: the kept turns (channel envelopes taken out), the stable block after
    the client's system prompt, the recall block after the latest user turn's
    content (or in the system position when there is no valid place there)."""
    items = [exchange.turns[i].item for i in plan.kept_positions]
    items = envelopes_strip(exchange.format, items) or items
    system = plan.stable_block
    attached = recall_attach(exchange.format, items, plan.recall_block)
    if attached is not None:
        items = attached
    elif plan.recall_block:
        system = f"{system}\n\n{plan.recall_block}" if system else plan.recall_block
    options: dict[str, Any] = {}
    if exchange.format == "anthropic":  # its cache mark goes before the recalled block
        options["recall_blocks"] = 1 if attached is not None else 0
    return adapter.render_request(exchange, items=items, system_block=system or None, **options)  # type: ignore[no-any-return]


def recall_attach(
    format: Format, items: list[dict[str, Any]], text: str
) -> list[dict[str, Any]] | None:
    """``items`` with ``text`` after the last user item's content, or ``None``."""
    if not text or not items:
        return None
    attached = _ATTACH[format](items[-1], text)
    if attached is None:
        return None
    return [*items[:-1], *(attached if isinstance(attached, list) else [attached])]


def _anthropic(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    if item.get("role") != "user":
        return None
    content = item.get("content")
    block = {"type": "text", "text": text}
    if isinstance(content, str):
        return {**item, "content": [{"type": "text", "text": content}, block]}
    if isinstance(content, list):
        return {**item, "content": [*content, block]}  # tool results still lead
    return None


def _openai_chat(item: dict[str, Any], text: str) -> list[dict[str, Any]] | dict[str, Any] | None:
    if item.get("role") == "tool":
        return [item, {"role": "user", "content": text}]
    if item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": f"{content}\n\n{text}"}
    if isinstance(content, list):
        return {**item, "content": [*content, {"type": "text", "text": text}]}
    return None


def _openai_responses(
    item: dict[str, Any], text: str
) -> list[dict[str, Any]] | dict[str, Any] | None:
    if item.get("type") == "function_call_output":
        return [item, {"role": "user", "content": text}]
    if item.get("role") != "user" or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": f"{content}\n\n{text}"}
    if isinstance(content, list):
        return {**item, "content": [*content, {"type": "input_text", "text": text}]}
    return None


def _gemini(item: dict[str, Any], text: str) -> dict[str, Any] | None:
    parts = item.get("parts")
    if item.get("role", "user") != "user" or not isinstance(parts, list):
        return None
    if any(
        isinstance(p, dict) and ("functionResponse" in p or "function_response" in p) for p in parts
    ):
        return None  # a function response content carries only function responses
    return {**item, "parts": [*parts, {"text": text}]}


_ATTACH: dict[str, Any] = {
    "anthropic": _anthropic,
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "gemini": _gemini,
}
