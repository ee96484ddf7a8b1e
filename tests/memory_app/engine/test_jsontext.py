from __future__ import annotations

import pytest

from memory_app.engine.jsontext import json_from_model_text

EXPECTED = {"summary": "a } b", "tags": ["x"]}
BODY = '{"summary": "a } b", "tags": ["x"]}'


@pytest.mark.parametrize(
    "text",
    [
        BODY,
        f"  {BODY}\n",
        f"```json\n{BODY}\n```",
        f"```\n{BODY}\n```",
        f"Here is the result:\n```JSON\n{BODY}\n```\nHope that helps.",
        f"<think>Let me think about {{braces}}.</think>\n{BODY}",
        f"<think>\nplan\n</think>\n\n```json\n{BODY}\n```",
        f"reasoning that lost its opening tag</think>{BODY}",
        f"The JSON is {BODY} as requested.",
        f"```json\n{BODY}",  # a reply cut off before the closing fence
    ],
)
def test_the_object_is_found_in_what_models_wrap_around_it(text: str) -> None:
    assert json_from_model_text(text) == EXPECTED


def test_a_fenced_object_wins_over_braces_in_prose() -> None:
    text = 'Use {curly} braces.\n```json\n{"summary": "s", "tags": []}\n```'

    assert json_from_model_text(text) == {"summary": "s", "tags": []}


def test_a_stray_brace_in_prose_does_not_hide_the_object() -> None:
    text = 'A lone { in the preamble. {"summary": "s", "tags": []}'

    assert json_from_model_text(text) == {"summary": "s", "tags": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I cannot do that.", "no JSON object"),
        ("", "no JSON object"),
        ('{"summary": "s", "tags": [],}', "no JSON object"),  # strict: no trailing commas
        ("{'summary': 's'}", "no JSON object"),
        ('{"meta": {"summary": "inner"}, }', "no JSON object"),  # no fragment of a bad object
        ('{"summary": "say \\"}\\" ok", "tags": [],}', "no JSON object"),
        ('["a", "b"]', "expected a JSON object, got list"),
        ('<think>{"summary": "draft"}', "unterminated <think>"),
    ],
)
def test_unusable_text_raises_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_from_model_text(text)
