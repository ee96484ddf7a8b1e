"""Read the JSON object a model was asked to return.

Contract: ``json_from_model_text(text)`` returns the first JSON object in a
model's reply, tolerating what models wrap around it and nothing more:

- reasoning before the answer: ``<think>…</think>`` blocks, or everything up to
  a lone closing ``</think>``;
- a fenced block (```` ```json … ``` ```` or a bare fence);
- prose before or after the object.

The object itself is parsed strictly (standard JSON: no trailing commas, no
single quotes, no comments). A reply with no parseable object, or whose JSON is
not an object, raises ``ValueError`` naming the problem and quoting the start of
the text.
"""

from __future__ import annotations

import json
import re
from typing import Any

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()


def json_from_model_text(text: str) -> dict[str, Any]:
    """The JSON object in ``text`` (see the module docstring)."""
    body = _without_reasoning(text)
    found_other: object = None
    for candidate in [*(m.group(1) for m in _FENCE.finditer(body)), body]:
        for value in _json_values(candidate):
            if isinstance(value, dict):
                return value
            if found_other is None:
                found_other = value
    if found_other is not None:
        raise ValueError(
            f"expected a JSON object, got {type(found_other).__name__}: {_quote(text)}"
        )
    raise ValueError(f"no JSON object in model text: {_quote(text)}")


def _without_reasoning(text: str) -> str:
    body = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(body))
    if closes:  # a reply that lost its opening tag: the answer follows the last close
        body = body[closes[-1].end() :]
    if re.search(r"<think>", body, re.IGNORECASE):
        raise ValueError(f"unterminated <think> block in model text: {_quote(text)}")
    return body.strip()


def _json_values(text: str) -> list[object]:
    """The JSON values that start at a ``{`` or ``[`` in ``text``, outermost only.

    A bracketed region that is not valid JSON is skipped whole, so a fragment
    inside a malformed object is never mistaken for the answer."""
    values: list[object] = []
    index = 0
    while True:
        starts = [i for i in (text.find("{", index), text.find("[", index)) if i >= 0]
        if not starts:
            return values
        start = min(starts)
        try:
            value, index = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            index = _region_end(text, start) or start + 1
            continue
        values.append(value)


def _region_end(text: str, start: int) -> int | None:
    """Index just past the bracket closing the one at ``start`` (strings respected)."""
    depth = 0
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if escaped:
            escaped = False
        elif in_string and char == "\\":
            escaped = True
        elif in_string:
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _quote(text: str, limit: int = 80) -> str:
    short = " ".join(text.split())
    return repr(short if len(short) <= limit else short[:limit] + "…")
