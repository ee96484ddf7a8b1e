"""Incremental Server-Sent Events parsing for stream observers.

``SSEParser.feed(chunk)`` takes raw bytes as they arrive (an event may be split
across chunks, or a chunk may hold many events) and returns the complete events
found so far as ``Event(name, data, start, end)``; ``start``/``end`` are offsets
into the concatenated stream, so an observer can tell where in the current chunk
an event began (to splice bytes in before it). Lines are separated by ``\\n``,
``\\r\\n`` or ``\\r``; an event ends at a blank line. Comments (``:``) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE_SPLIT = re.compile(rb"\r\n|\n|\r")


@dataclass(slots=True)
class Event:
    name: str
    data: bytes
    start: int
    end: int


class SSEParser:
    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0  # stream offset of self._buffer[0]

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[Event] = []
        pos = 0
        while True:
            match = _EVENT_END.search(buffer, pos)
            if match is None:
                break
            event = _parse_block(buffer[pos : match.start()])
            if event is not None:
                name, data = event
                events.append(Event(name, data, self._offset + pos, self._offset + match.end()))
            pos = match.end()
        self._buffer = buffer[pos:]
        self._offset += pos
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated by a blank line."""
        return self._buffer


def _parse_block(block: bytes) -> tuple[str, bytes] | None:
    name = "message"
    data: list[bytes] = []
    for line in _LINE_SPLIT.split(block):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"event":
            name = value.decode("utf-8", "replace")
        elif field == b"data":
            data.append(value)
    if not data and name == "message":
        return None
    return name, b"\n".join(data)
