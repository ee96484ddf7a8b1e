"""Session dates learned from the text of a turn.

Contract:

- ``session_date_from_text`` reads a date header at the very start of a
  message (its first line) and nothing else: ``[2023/05/20 (Sat) 02:21]``,
  ``2023/05/20 (Sat) 02:21``, ``[2024-01-03T10:00:00Z]``,
  ``[Sat 2026-02-14 18:49 GMT-3]``, ``Session date: 2023-05-20``,
  ``Date: May 20, 2023``. A date later in the text, or a first line that merely
  begins with a bare date (``2023-05-20 was the day…``), is not a header.
  The date is the one written (local to the writer), not converted to UTC.
- ``envelope_strip`` removes the channel envelope a gateway such as OpenClaw
  puts before the user's words — ``Conversation info (untrusted metadata):``
  and further ``… (untrusted metadata):`` headers, each followed by a fenced
  JSON object — and returns the text after it with the fields as strings.
  Fields of the ``Conversation info`` block keep their names; those of the
  other blocks are prefixed with the header (``sender.name``).
  ``session_date_from_envelope`` reads its ``timestamp`` (or ``date``).
- ``session_date_of`` tries the envelope, then the header, then ``timestamp``.
- ``stamps_strip`` removes date stamps from a text for matching: a header on
  its first line, and bracketed numeric dates anywhere (``[2023/05/20 (Sat)
  02:21]``, ``[2023-05-20]``). Dates reach retrieval through session dates and
  the temporal signal; as words they would match every turn of the same day.

Regexes read the common forms; ``dateparser`` (imported lazily: it is slow to
import) only reads the values of labelled headers and envelope timestamps that
the regexes do not, and never relative dates ("yesterday").
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from typing import Any

_WEEKDAY = r"(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?"
_NUMERIC = re.compile(
    rf"^\s*(?:{_WEEKDAY}\s+)?(?P<y>\d{{4}})([/.-])(?P<m>\d{{1,2}})\2(?P<d>\d{{1,2}})(?P<rest>.*)$",
    re.I,
)
_MONTH_FIRST = re.compile(
    rf"^\s*(?:{_WEEKDAY}\s+)?(?P<mon>[a-z]{{3,9}})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})(?P<rest>.*)$",
    re.I,
)
_DAY_FIRST = re.compile(
    rf"^\s*(?:{_WEEKDAY}\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon>[a-z]{{3,9}})\.?,?\s+(?P<y>\d{{4}})(?P<rest>.*)$",
    re.I,
)
# What may follow a bare (unbracketed) date for the line to be a header.
_QUALIFIER = re.compile(r"\s*(?:\(\s*[a-z]{3,9}\.?\s*\)|[T ]\s*\d{1,2}:\d{2})", re.I)
_BRACKETED = re.compile(r"^\s*\[([^\]\n]{1,80})\](?!\()")
_LABELLED = re.compile(r"^\s*(?:session\s+date|date)\s*[:=]\s*(?P<value>\S.*)$", re.I)
_EPOCH = re.compile(r"\d{9,13}(?:\.\d+)?")
_MONTHS: tuple[str, ...] = ("january", "february", "march", "april", "may", "june")
_MONTHS += ("july", "august", "september", "october", "november", "december")

_ENVELOPE_BLOCK = re.compile(
    r"\A\s*(?P<header>[^\n():]{1,60}?)[ \t]*(?P<note>\([^)\n]*\))?[ \t]*:[ \t]*\r?\n"
    r"[ \t]*```[ \t]*(?:json)?[ \t]*\r?\n(?P<body>.*?)\r?\n[ \t]*```[ \t]*(?=\r?\n|\Z)",
    re.S | re.I,
)
_ENVELOPE_DATE_FIELDS = ("timestamp", "date")


_STAMP = re.compile(
    rf"\[\s*(?:{_WEEKDAY}\s+)?\d{{4}}[/.-]\d{{1,2}}[/.-]\d{{1,2}}[^\]\n]{{0,40}}\]", re.I
)

# ------------------------------------------------------------------ headers


def stamps_strip(text: str) -> str:
    """``text`` without its date stamps (see the module contract)."""
    if session_date_from_text(text) is not None and not _BRACKETED.match(text.lstrip()):
        text = text.lstrip("\ufeff \t\r\n").partition("\n")[2]
    return _STAMP.sub(" ", text) if "[" in text else text


def session_date_from_text(text: str) -> date | None:
    """The date of a header on the first line of ``text``, or None."""
    line = text.lstrip("\ufeff \t\r\n").split("\n", 1)[0][:200]
    bracketed = _BRACKETED.match(line)
    if bracketed:
        return _header_date(bracketed.group(1), bare=False)
    return _header_date(line, bare=True)


def parse_date(value: str) -> date | None:
    """The calendar date a date or timestamp string starts with, or None."""
    for pattern in (_NUMERIC, _MONTH_FIRST, _DAY_FIRST):
        found = _match_date(pattern, value)
        if found is not None:
            return found[0]
    return _dateparser_date(value)


def _header_date(header: str, *, bare: bool) -> date | None:
    labelled = _LABELLED.match(header)
    if labelled:
        return parse_date(labelled.group("value").strip().rstrip("]"))
    for pattern in (_NUMERIC, _MONTH_FIRST, _DAY_FIRST):
        found = _match_date(pattern, header)
        if found is None:
            continue
        day, rest = found
        if not bare or not rest.strip():
            return day
        return day if pattern is _NUMERIC and _QUALIFIER.match(rest) else None
    return None


def _match_date(pattern: re.Pattern[str], text: str) -> tuple[date, str] | None:
    match = pattern.match(text)
    if not match:
        return None
    groups = match.groupdict()
    month = _month_number(groups["mon"]) if "mon" in groups else int(groups["m"])
    day = _make_date(int(groups["y"]), month, int(groups["d"]))
    return None if day is None else (day, groups["rest"])


def _month_number(word: str) -> int:
    word = word.lower()
    for number, name in enumerate(_MONTHS, start=1):
        if name.startswith(word):
            return number
    return 0


def _make_date(year: int, month: int, day: int) -> date | None:
    if not 1900 <= year <= 2200:
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _dateparser_date(value: str) -> date | None:
    import dateparser  # slow to import: only when the regexes gave up

    parsed = dateparser.parse(
        value[:100],
        languages=["en"],
        settings={
            "PARSERS": ["custom-formats", "absolute-time"],
            "REQUIRE_PARTS": ["day", "month", "year"],
        },
    )
    return parsed.date() if isinstance(parsed, datetime) else None


# ------------------------------------------------------------------ envelopes


def envelope_strip(text: str) -> tuple[str, dict[str, str]]:
    """``text`` without its leading metadata envelope, and the envelope's fields."""
    fields: dict[str, str] = {}
    rest, stripped = text, False
    while match := _ENVELOPE_BLOCK.match(rest):
        header = match.group("header").strip()
        conversation = header.lower().startswith("conversation info")
        if not conversation and "untrusted metadata" not in (match.group("note") or "").lower():
            break
        try:
            parsed = json.loads(match.group("body"))
        except ValueError:
            break
        if not isinstance(parsed, dict):
            break
        prefix = "" if conversation else re.sub(r"\W+", "_", header.lower()).strip("_") + "."
        for key, value in parsed.items():
            if value is not None:
                fields.setdefault(prefix + str(key), _as_text(value))
        rest, stripped = rest[match.end() :], True
    return (rest.lstrip(), fields) if stripped else (text, {})


def session_date_from_envelope(fields: dict[str, str]) -> date | None:
    """The date of an envelope's ``timestamp`` (or ``date``) field, or None."""
    for key in _ENVELOPE_DATE_FIELDS:
        value = (fields.get(key) or "").strip()
        if not value:
            continue
        if _EPOCH.fullmatch(value):
            seconds = float(value)
            seconds = seconds / 1000 if seconds > 1e11 else seconds  # milliseconds
            return datetime.fromtimestamp(seconds, tz=UTC).date()
        found = parse_date(value)
        if found is not None:
            return found
    return None


def session_date_of(text: str, timestamp: datetime | None = None) -> date | None:
    """A turn's session date: its envelope, else its header, else ``timestamp``."""
    stripped, fields = envelope_strip(text)
    found = session_date_from_envelope(fields) or session_date_from_text(stripped)
    if found is None and timestamp is not None:
        return timestamp.date()
    return found


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
