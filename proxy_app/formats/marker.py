"""Session markers: the signed conversation id the proxy appends to assistant replies.

A marker is an HTML comment ``<!-- vc:TOKEN -->`` (TOKEN: letters, digits, ``.``,
``_``, ``-``, ``:``). Signing and verifying TOKEN is the caller's business; this
module only finds, strips and formats markers in text.
"""

from __future__ import annotations

import re

MARKER_RE = re.compile(r"\n*<!-- vc:([A-Za-z0-9._:\-]+) -->")


def marker_text(token: str) -> str:
    """The text appended to a reply: a blank line, then the comment."""
    return f"\n\n<!-- vc:{token} -->"


def find_marker(text: str) -> str | None:
    """The last marker token in ``text``, or None."""
    last = None
    for match in MARKER_RE.finditer(text):
        last = match.group(1)
    return last


def strip_markers(text: str) -> str:
    """``text`` with every marker (and the newlines before it) removed."""
    if "<!-- vc:" not in text:
        return text
    return MARKER_RE.sub("", text)
