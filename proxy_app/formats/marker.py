"""Session markers: the signed conversation id the proxy appends to assistant replies.

A marker is an HTML comment ``<!-- vc:TOKEN -->`` (TOKEN: letters, digits, ``.``,
``_``, ``-``, ``:``). Signing and verifying TOKEN is the caller's business; this
module only finds, strips and formats markers in text.

The proxy appends a blank line and the comment. Stripping removes the comment
and at most two line breaks before it (``\n``, ``\r\n`` or ``\r``: clients
re-encode or trim that blank line), so a newline the model itself ended its text
with is sent back upstream as the model wrote it.
"""

from __future__ import annotations

import re
from typing import Any

MARKER_RE = re.compile(r"(?:\r\n|\r|\n){0,2}<!-- vc:([A-Za-z0-9._:\-]+) -->")


def marker_text(token: str) -> str:
    """The text appended to a reply: a blank line, then the comment."""
    return f"\n\n<!-- vc:{token} -->"


def find_marker(text: str) -> str | None:
    """The last marker token in ``text``, or None."""
    if "<!-- vc:" not in text:  # the common case, and the regex is slow to fail
        return None
    last = None
    for match in MARKER_RE.finditer(text):
        last = match.group(1)
    return last


def strip_markers(text: str) -> str:
    """``text`` with every marker (and up to two line breaks before it) removed."""
    if "<!-- vc:" not in text:
        return text
    return MARKER_RE.sub("", text)


def _text_of(block: Any) -> str:
    if isinstance(block, dict) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else ""
    return ""


def content_marker(content: Any) -> str | None:
    """The last marker token in message content: a string, or a list of
    ``{"type": "text", "text": …}`` blocks among others (Anthropic, Chat)."""
    if isinstance(content, str):
        return find_marker(content)
    found = None
    if isinstance(content, list):
        for block in content:
            found = find_marker(_text_of(block)) or found
    return found


def content_strip(content: Any) -> Any:
    """``content`` without markers; text blocks that stripping empties are
    dropped, unless nothing else is left (then one empty text block stays)."""
    if isinstance(content, str):
        return strip_markers(content)
    if not isinstance(content, list):
        return content
    kept: list[Any] = []
    emptied: dict[str, Any] | None = None
    for block in content:
        text = _text_of(block)
        if "<!-- vc:" not in text:
            kept.append(block)
            continue
        stripped = strip_markers(text)
        if stripped:
            kept.append({**block, "text": stripped})
        else:
            emptied = {**block, "text": ""}
    if not kept and emptied is not None:
        kept.append(emptied)
    return kept
