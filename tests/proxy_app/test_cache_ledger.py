"""Prompt-cache reads reach the ledger for every wire format, streamed or not.

Two requests of one conversation share a system prompt of about 2,500 tokens
(``LONG``) and go through the real proxy to the fake provider with the official
SDKs. The fake reports the shared prefix as cached the way each provider does
(``test_fake_cache.py`` holds the oracle); here the second request's
``RequestLog`` and ``LLMCall`` rows must carry those cached tokens and be priced
with the catalog's cache-read price, below what the same tokens cost at the
full input price. The histories stay small, so nothing is planned and the
upstream body is the client's.

Anthropic and Chat (streamed and not) are covered in ``test_fake_cache.py``
(``test_anthropic_cache_usage_reaches_the_ledger``,
``test_chat_cache_usage_reaches_the_ledger``); this module adds the Responses
API and Gemini (``generateContent`` and ``streamGenerateContent?alt=sse``).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from google import genai
from google.genai import types

from telemetry_app.models import LLMCall, RequestLog
from tests.fakes.provider import FakeProvider
from tests.proxy_app.conftest import ProxyKey
from tests.proxy_app.test_e2e_calls import requests_of
from tests.proxy_app.test_fake_cache import (
    assert_ledger_prices,
    automatic_cached,
    bodies,
    gemini_usage,
    ledger_row,
    responses_usage,
)

pytestmark = [
    pytest.mark.usefixtures("orm"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]


def two_rows(
    proxy_key: ProxyKey, fake: FakeProvider, stream: bool
) -> tuple[list[RequestLog], list[LLMCall]]:
    logs = requests_of(proxy_key, 2)
    assert [log.stream for log in logs] == [stream, stream]
    assert all(b"<virtual-context>" not in r.body for r in fake.requests[-2:])  # not planned
    return logs, [ledger_row(log) for log in logs]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cache_usage_reaches_the_ledger(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    items: list[Any] = [{"role": "user", "content": "question 0"}]
    first = responses_usage(gpt, items, stream)
    items += [{"role": "assistant", "content": "answer"}, {"role": "user", "content": "more"}]
    second = responses_usage(gpt, items, stream)

    expected = automatic_cached(*bodies(fake))
    assert expected >= 1024
    assert first.input_tokens_details.cached_tokens == 0
    assert second.input_tokens_details.cached_tokens == expected
    logs, calls = two_rows(proxy_key, fake, stream)
    assert_ledger_prices(logs[0], calls[0], read=0, write=0)
    assert_ledger_prices(logs[1], calls[1], read=expected, write=0)
    # Responses counts the cached part inside ``input_tokens``, as the ledger does.
    assert (calls[1].input_tokens, calls[1].output_tokens) == (
        second.input_tokens,
        second.output_tokens,
    )
    assert calls[1].input_tokens == len(fake.requests[-1].body) // 4


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_cache_usage_reaches_the_ledger(
    gemini: genai.Client, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    contents: list[Any] = [types.UserContent("question 0")]
    first = gemini_usage(gemini, contents, stream)
    contents += [types.ModelContent("answer"), types.UserContent("more")]
    second = gemini_usage(gemini, contents, stream)

    expected = automatic_cached(*bodies(fake))
    assert expected >= 1024
    if stream:
        assert fake.requests[-1].path.endswith(":streamGenerateContent")
        assert "alt=sse" in fake.requests[-1].query
    assert (first.cached_content_token_count or 0) == 0
    assert second.cached_content_token_count == expected
    logs, calls = two_rows(proxy_key, fake, stream)
    assert_ledger_prices(logs[0], calls[0], read=0, write=0)
    assert_ledger_prices(logs[1], calls[1], read=expected, write=0)
    # Gemini counts the cached part inside ``promptTokenCount``, as the ledger does.
    assert calls[1].input_tokens == second.prompt_token_count
    assert calls[1].output_tokens == second.candidates_token_count + (
        second.thoughts_token_count or 0
    )
    assert calls[1].input_tokens == len(fake.requests[-1].body) // 4
