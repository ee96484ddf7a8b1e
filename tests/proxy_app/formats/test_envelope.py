"""Channel envelopes out of user turns, per wire format."""

from __future__ import annotations

import copy

import pytest

from proxy_app.formats.envelope import envelopes_strip, may_carry_envelopes

ENVELOPE = (
    "Conversation info (untrusted metadata):\n"
    "```json\n"
    '{"channel": "telegram", "timestamp": "2026-02-14T18:49:00Z"}\n'
    "```\n\n"
)
WORDS = "Book the ferry to Naxos for Friday."


def _user(fmt: str, text: str) -> dict:
    if fmt == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    if fmt == "openai_responses":
        return {"role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"role": "user", "content": text}


def _text(fmt: str, item: dict) -> str:
    if fmt == "gemini":
        return item["parts"][0]["text"]
    content = item["content"]
    return content if isinstance(content, str) else content[0]["text"]


@pytest.mark.parametrize("fmt", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_the_envelope_leaves_the_user_turn_and_nothing_else_changes(fmt: str) -> None:
    assistant = {"role": "assistant", "content": ENVELOPE + "quoted back"}  # not a user turn
    items = [_user(fmt, ENVELOPE + WORDS), assistant, _user(fmt, "and a hotel")]
    before = copy.deepcopy(items)
    out = envelopes_strip(fmt, items)
    assert out is not None
    assert _text(fmt, out[0]) == WORDS
    assert out[1] is items[1]
    assert out[2] is items[2]
    assert items == before  # the inputs are untouched


def test_list_content_strips_only_a_leading_text_block() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    item = {"role": "user", "content": [{"type": "text", "text": ENVELOPE + WORDS}, image]}
    [out] = envelopes_strip("anthropic", [item])
    assert out["content"] == [{"type": "text", "text": WORDS}, image]
    later = {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": ENVELOPE}],
    }
    assert envelopes_strip("anthropic", [later]) is None


def test_no_envelope_means_none_and_a_cheap_byte_test() -> None:
    assert envelopes_strip("openai_chat", [_user("openai_chat", WORDS)]) is None
    # A block that only looks like one (not JSON) is the user's own text.
    fake = "Conversation info (untrusted metadata):\n```json\nnot json\n```\n" + WORDS
    assert envelopes_strip("openai_chat", [_user("openai_chat", fake)]) is None
    assert may_carry_envelopes(ENVELOPE.encode())
    assert not may_carry_envelopes(WORDS.encode())
