from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory_app.engine.dates import (
    envelope_strip,
    session_date_from_envelope,
    session_date_from_text,
    session_date_of,
)

OPENCLAW = """Conversation info (untrusted metadata):
```json
{
  "message_id": "4542",
  "sender_id": "5003590611",
  "sender": "D W",
  "timestamp": "Sat 2026-03-28 16:12 PDT"
}
```

Sender (untrusted metadata):
```json
{
  "label": "D W (5003590611)",
  "id": 5003590611,
  "name": "D W"
}
```

Yes Data Analyst check
and report back"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[2023/05/20 (Sat) 02:21] I adopted a cat.", date(2023, 5, 20)),
        ("2023/05/20 (Sat) 02:21\nI adopted a cat.", date(2023, 5, 20)),
        ("2023/05/20\nI adopted a cat.", date(2023, 5, 20)),
        ("[2024-01-03T10:00:00Z] hello", date(2024, 1, 3)),
        ("2024-01-03T10:00:00+02:00 hello", date(2024, 1, 3)),
        ("[Sat 2026-02-14 18:49 GMT-3] hola", date(2026, 2, 14)),
        ("Session date: 2023-05-20\nhello", date(2023, 5, 20)),
        ("session date: 2023/05/20 (Sat) 02:21\nhello", date(2023, 5, 20)),
        ("[Session date: 2023-05-20] hello", date(2023, 5, 20)),
        ("Date: May 20, 2023\nhello", date(2023, 5, 20)),
        ("Date: Saturday, 20th of May 2023\nhello", date(2023, 5, 20)),
        ("Date: Sept 3 2023", date(2023, 9, 3)),
        ("Date: 05/20/2023\nhello", date(2023, 5, 20)),  # dateparser's fallback
        ("[May 20, 2023] hello", date(2023, 5, 20)),
        ("  \n[2023/05/20 (Sat) 02:21] leading blank lines are fine", date(2023, 5, 20)),
    ],
)
def test_leading_date_header_gives_the_session_date(text: str, expected: date) -> None:
    assert session_date_from_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I adopted a cat on 2023/05/20 (Sat) 02:21.",
        "hello\n[2023/05/20 (Sat) 02:21]",
        "hello\nSession date: 2023-05-20",
        "2023-05-20 was the day I adopted a cat.",
        "May 20, 2023 was the day I adopted a cat.",
        "[2023/13/40] not a date",
        "[message_id: 123] hi",
        "[2023-05-20](https://example.test/log) a link",
        "Date: yesterday",
        "Date: tomorrow we meet",
        "",
    ],
)
def test_dates_that_are_not_a_leading_header_are_ignored(text: str) -> None:
    assert session_date_from_text(text) is None


def test_envelope_strip_removes_the_metadata_blocks_and_returns_their_fields() -> None:
    text, fields = envelope_strip(OPENCLAW)
    assert text == "Yes Data Analyst check\nand report back"
    assert fields["timestamp"] == "Sat 2026-03-28 16:12 PDT"
    assert fields["message_id"] == "4542"
    assert fields["sender.name"] == "D W"
    assert fields["sender.id"] == "5003590611"


def test_envelope_strip_reads_a_compact_envelope() -> None:
    raw = 'Conversation info (untrusted metadata):\n```json\n{"channel": "telegram", "timestamp": "2024-03-05T10:00:00Z"}\n```\nHi there'
    assert envelope_strip(raw) == (
        "Hi there",
        {"channel": "telegram", "timestamp": "2024-03-05T10:00:00Z"},
    )


@pytest.mark.parametrize(
    "text",
    [
        "Hi there",
        "Hi there\nConversation info (untrusted metadata):\n```json\n{}\n```\n",
        "Conversation info (untrusted metadata):\n```json\n{not json\n```\nHi",
        "Conversation info (untrusted metadata):\n```json\n[1, 2]\n```\nHi",
        'Example config:\n```json\n{"a": 1}\n```\nWhat does it do?',
    ],
)
def test_envelope_strip_leaves_other_text_alone(text: str) -> None:
    assert envelope_strip(text) == (text, {})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"timestamp": "Sat 2026-03-28 16:12 PDT"}, date(2026, 3, 28)),
        ({"timestamp": "2024-03-05T23:30:00-08:00"}, date(2024, 3, 5)),
        ({"date": "March 5, 2024"}, date(2024, 3, 5)),
        ({"timestamp": "1709632800000"}, date(2024, 3, 5)),  # epoch milliseconds
        ({"timestamp": "1709632800"}, date(2024, 3, 5)),
        ({"timestamp": "garbage", "date": "2024-03-05"}, date(2024, 3, 5)),
        ({"channel": "telegram"}, None),
        ({}, None),
    ],
)
def test_session_date_from_envelope(fields: dict[str, str], expected: date | None) -> None:
    assert session_date_from_envelope(fields) == expected


def test_session_date_of_prefers_envelope_then_header_then_timestamp() -> None:
    stamp = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
    assert session_date_of(OPENCLAW, stamp) == date(2026, 3, 28)
    headed = 'Conversation info (untrusted metadata):\n```json\n{"channel": "x"}\n```\n[2023/05/20 (Sat) 02:21] hi'
    assert session_date_of(headed, stamp) == date(2023, 5, 20)
    assert session_date_of("[2023/05/20 (Sat) 02:21] hi", stamp) == date(2023, 5, 20)
    assert session_date_of("just words", stamp) == date(2025, 1, 2)
    assert session_date_of("just words") is None


def test_stamps_strip_removes_headers_and_bracketed_dates_only() -> None:
    from memory_app.engine.dates import stamps_strip

    assert stamps_strip("[2023/05/30 (Tue) 20:08] What was my job?").strip() == "What was my job?"
    assert stamps_strip("Session date: 2023-05-20\nI moved to Lisbon") == "I moved to Lisbon"
    assert "2023" not in stamps_strip("[2023-05-30]\nuser: [Sat 2023-05-20 10:00] at the fair")
    # Dates that are content, and brackets that are not dates, stay.
    assert stamps_strip("2023-05-20 was the day I moved") == "2023-05-20 was the day I moved"
    assert stamps_strip("see [link] and [2023] items") == "see [link] and [2023] items"
