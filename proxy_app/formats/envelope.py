"""Channel envelopes taken out of user turns before they go upstream.

Gateways such as OpenClaw put a metadata envelope before the user's words
(``Conversation info (untrusted metadata):`` and a fenced JSON object, see
``memory_app.engine.dates.envelope_strip``). The stored turn keeps it verbatim
(its timestamp is the turn's session date); the model gets the words without
it. ``envelopes_strip(format, items)`` returns the history items with the
envelope removed from the first text of each user item, or ``None`` when no
item had one. Pure: dicts in, new dicts out, the inputs untouched.
"""

from __future__ import annotations

from typing import Any

from memory_app.engine.dates import envelope_strip

from .types import Format

SIGNS = (b"(untrusted metadata)", b"Conversation info")


def may_carry_envelopes(body: bytes) -> bool:
    """A cheap test on the raw body before any item is looked at."""
    return any(sign in body for sign in SIGNS)


def envelopes_strip(format: Format, items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    out = [_item(format, item) for item in items]
    return out if any(new is not old for new, old in zip(out, items, strict=True)) else None


def _item(format: Format, item: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(item, dict) or item.get("role") != "user":
        return item
    key = "parts" if format == "gemini" else "content"
    content = item.get(key)
    if isinstance(content, str):
        text = _stripped(content)
        return item if text is None else {**item, key: text}
    if not isinstance(content, list):
        return item
    for i, part in enumerate(content):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            text = _stripped(part["text"])
            if text is None:
                return item  # only a leading text carries an envelope
            return {**item, key: [*content[:i], {**part, "text": text}, *content[i + 1 :]]}
    return item


def _stripped(text: str) -> str | None:
    rest, _ = envelope_strip(text)
    return rest if rest != text else None
