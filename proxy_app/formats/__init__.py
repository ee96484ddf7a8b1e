"""Wire-format adapters: pure functions, dict in / dict out, one module per format.

Each adapter module (``anthropic``, ``openai_chat``, ``openai_responses``, ``gemini``)
exposes the same functions; see ``types.py`` for the neutral shapes and the
contract every adapter follows. ``ADAPTERS`` maps a format name to its module.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from proxy_app.formats import anthropic, gemini, openai_chat, openai_responses
from proxy_app.formats.types import Format, Turn

ADAPTERS: dict[Format, ModuleType] = {
    "anthropic": anthropic,
    "openai_chat": openai_chat,
    "openai_responses": openai_responses,
    "gemini": gemini,
}

# The request field that carries the history, per format.
HISTORY_FIELD: dict[Format, str] = {
    "anthropic": "messages",
    "openai_chat": "messages",
    "openai_responses": "input",
    "gemini": "contents",
}


def turns_of(format: Format, items: list[dict[str, Any]]) -> list[Turn]:
    """Turns of history items, exactly as ``parse_request`` would see them resent."""
    body: dict[str, Any] = {"model": "", HISTORY_FIELD[format]: items}
    return list(ADAPTERS[format].parse_request(body, model="", stream=False).turns)
