"""Attaching the recall block to the latest user turn, per format."""

from __future__ import annotations

import pytest

from proxy_app.formats.recall import recall_attach

TEXT = "<recalled-context>x</recalled-context>"
MARK = {"type": "ephemeral"}
RESULT = {"type": "tool_result", "tool_use_id": "t", "content": "r"}


@pytest.mark.parametrize(
    ("fmt", "item", "expected"),
    [
        (
            "anthropic",
            {"role": "user", "content": "q"},
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "q"}, {"type": "text", "text": TEXT}],
                }
            ],
        ),
        (
            "anthropic",
            {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": MARK}]},
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "q", "cache_control": MARK},
                        {"type": "text", "text": TEXT},
                    ],
                }
            ],
        ),
        (
            "anthropic",
            {"role": "user", "content": [RESULT]},
            [{"role": "user", "content": [RESULT, {"type": "text", "text": TEXT}]}],
        ),
        (
            "openai_chat",
            {"role": "user", "content": "q"},
            [{"role": "user", "content": f"q\n\n{TEXT}"}],
        ),
        (
            "openai_chat",
            {"role": "tool", "tool_call_id": "t", "content": "r"},
            [
                {"role": "tool", "tool_call_id": "t", "content": "r"},
                {"role": "user", "content": TEXT},
            ],
        ),
        (
            "openai_responses",
            {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "q"},
                        {"type": "input_text", "text": TEXT},
                    ],
                }
            ],
        ),
        (
            "openai_responses",
            {"type": "function_call_output", "call_id": "t", "output": "r"},
            [
                {"type": "function_call_output", "call_id": "t", "output": "r"},
                {"role": "user", "content": TEXT},
            ],
        ),
        (
            "gemini",
            {"role": "user", "parts": [{"text": "q"}]},
            [{"role": "user", "parts": [{"text": "q"}, {"text": TEXT}]}],
        ),
    ],
)
def test_the_block_follows_the_latest_user_content_and_earlier_items_are_untouched(
    fmt, item, expected
):
    earlier = {"role": "assistant", "content": "a"}
    out = recall_attach(fmt, [earlier, item], TEXT)
    assert out == [earlier, *expected]
    assert out[0] is earlier  # the prefix is the same object, byte for byte


@pytest.mark.parametrize(
    ("fmt", "item"),
    [
        ("anthropic", {"role": "assistant", "content": "a"}),
        ("openai_chat", {"role": "assistant", "content": "a"}),
        ("openai_responses", {"type": "function_call", "call_id": "t", "name": "f"}),
        (
            "gemini",
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ),
    ],
)
def test_no_valid_place_to_carry_it_leaves_the_history_alone(fmt, item):
    assert recall_attach(fmt, [item], TEXT) is None


def test_an_empty_block_attaches_nothing():
    assert recall_attach("openai_chat", [{"role": "user", "content": "q"}], "") is None
