"""The fake provider reports prompt-cache usage the way each provider does, and
vcloud's ledger records it end to end.

The expected figures come from a small oracle written here from the cost model
of ``../shared/benchmarks/cache/billing.py`` (canonical prompt, characters / 4,
longest common prefix with the previous request, 1,024-token minimum, 128-token
steps; Anthropic only at its ``cache_control`` marks), applied to the bodies the
fake recorded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from telemetry_app.models import LLMCall, RequestLog
from telemetry_app.pricing import call_cost, price_lookup
from tests.fakes.provider import FakeProvider, RunningFake
from tests.proxy_app.conftest import ProxyKey
from tests.proxy_app.test_e2e_calls import requests_of

# About 2,500 tokens of text that does not repeat itself.
LONG = " ".join(
    f"Fact {i}: the parcel for order {i * 37 % 1009} left depot {i % 13}." for i in range(200)
)
EPHEMERAL = {"type": "ephemeral"}
PROMPT_KEYS = (
    "tools",
    "system",
    "instructions",
    "system_instruction",
    "messages",
    "input",
    "contents",
)

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


# ---------------------------------------------------------------------- the oracle


def canonical(body: dict[str, Any]) -> str:
    slots = [body.get(key) for key in PROMPT_KEYS]
    slots[3] = body.get("system_instruction", body.get("systemInstruction"))
    return json.dumps(slots, ensure_ascii=False, separators=(",", ":"))


def automatic_cached(previous: dict[str, Any], current: dict[str, Any]) -> int:
    """OpenAI/Gemini: the shared prefix in whole 128-token steps, from 1,024 tokens."""
    tokens = len(os.path.commonprefix([canonical(previous), canonical(current)])) // 4
    return tokens // 128 * 128 if tokens >= 1024 else 0


def unmarked(value: Any) -> Any:
    """``value`` without its ``cache_control`` keys: the prompt a cache sees."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def mark_tokens(body: dict[str, Any], block: dict[str, Any]) -> int:
    """Anthropic: tokens of the prefix that ends with the marked ``block`` (the
    marks themselves are not part of the prompt)."""
    text = canonical(unmarked(body))
    dumped = json.dumps(unmarked(block), ensure_ascii=False, separators=(",", ":"))
    assert text.count(dumped) == 1
    return (text.index(dumped) + len(dumped)) // 4


def bodies(fake: FakeProvider) -> tuple[dict[str, Any], dict[str, Any]]:
    """The last two generating requests the fake recorded."""
    previous, current = fake.requests[-2], fake.requests[-1]
    return previous.json, current.json


# ------------------------------------------------------------------------ clients


@pytest.fixture
def served(fake_provider: RunningFake) -> Iterator[RunningFake]:
    fake_provider.fake.reset()
    yield fake_provider
    fake_provider.fake.reset()


@pytest.fixture
def direct_claude(served: RunningFake) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k-cache-ant", base_url=served.url, max_retries=0)


@pytest.fixture
def direct_gpt(served: RunningFake) -> openai.OpenAI:
    return openai.OpenAI(api_key="k-cache-oai", base_url=served.url + "/v1", max_retries=0)


@pytest.fixture
def direct_gemini(served: RunningFake) -> genai.Client:
    options = types.HttpOptions(base_url=served.url)
    return genai.Client(api_key="k-cache-gem", http_options=options)


def chat_history(turns: int) -> list[Any]:
    messages: list[Any] = [{"role": "system", "content": LONG}]
    for n in range(turns):
        if n:
            messages.append({"role": "assistant", "content": f"answer {n}"})
        messages.append({"role": "user", "content": f"question {n}"})
    return messages


# ---------------------------------------------------------------- OpenAI and Gemini


def chat_usage(client: openai.OpenAI, messages: list[Any], stream: bool) -> Any:
    if not stream:
        return client.chat.completions.create(model="gpt-4o", messages=messages).usage
    chunks = client.chat.completions.create(
        model="gpt-4o", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    return [c for c in chunks if c.usage][-1].usage


@pytest.mark.parametrize("stream", [False, True])
def test_chat_reports_the_prefix_of_the_previous_request_as_cached_tokens(
    direct_gpt: openai.OpenAI, served: RunningFake, stream: bool
) -> None:
    first = chat_usage(direct_gpt, chat_history(1), stream)
    second = chat_usage(direct_gpt, chat_history(2), stream)

    expected = automatic_cached(*bodies(served.fake))
    assert expected >= 1024
    assert first.prompt_tokens_details.cached_tokens == 0
    assert second.prompt_tokens_details.cached_tokens == expected
    # OpenAI counts the cached part inside the prompt total.
    assert second.prompt_tokens == len(served.fake.requests[-1].body) // 4


def responses_usage(client: openai.OpenAI, items: list[Any], stream: bool) -> Any:
    if not stream:
        return client.responses.create(model="gpt-4o", instructions=LONG, input=items).usage
    events = client.responses.create(model="gpt-4o", instructions=LONG, input=items, stream=True)
    return [e for e in events if e.type == "response.completed"][-1].response.usage


@pytest.mark.parametrize("stream", [False, True])
def test_responses_report_the_prefix_of_the_previous_request_as_cached_tokens(
    direct_gpt: openai.OpenAI, served: RunningFake, stream: bool
) -> None:
    items: list[Any] = [{"role": "user", "content": "question 0"}]
    first = responses_usage(direct_gpt, items, stream)
    items += [{"role": "assistant", "content": "answer"}, {"role": "user", "content": "more"}]
    second = responses_usage(direct_gpt, items, stream)

    expected = automatic_cached(*bodies(served.fake))
    assert expected >= 1024
    assert first is not None
    assert second is not None
    assert first.input_tokens_details.cached_tokens == 0
    assert second.input_tokens_details.cached_tokens == expected
    assert second.input_tokens == len(served.fake.requests[-1].body) // 4


def gemini_usage(client: genai.Client, contents: list[Any], stream: bool) -> Any:
    config = types.GenerateContentConfig(system_instruction=LONG)
    if not stream:
        response = client.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config=config
        )
        return response.usage_metadata
    chunks = client.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config
    )
    return [c.usage_metadata for c in chunks if c.usage_metadata][-1]


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_reports_the_prefix_of_the_previous_request_as_cached_content(
    direct_gemini: genai.Client, served: RunningFake, stream: bool
) -> None:
    contents: list[Any] = [types.UserContent("question 0")]
    first = gemini_usage(direct_gemini, contents, stream)
    contents += [types.ModelContent("answer"), types.UserContent("more")]
    second = gemini_usage(direct_gemini, contents, stream)

    expected = automatic_cached(*bodies(served.fake))
    assert expected >= 1024
    assert "systemInstruction" in served.fake.requests[-1].json
    assert (first.cached_content_token_count or 0) == 0
    assert second.cached_content_token_count == expected
    assert second.prompt_token_count == len(served.fake.requests[-1].body) // 4


def test_a_short_shared_prefix_is_not_cached(
    direct_gpt: openai.OpenAI, served: RunningFake
) -> None:
    short: list[Any] = [{"role": "user", "content": "hello"}]
    chat_usage(direct_gpt, short, stream=False)
    usage = chat_usage(direct_gpt, [*short, {"role": "user", "content": "again"}], stream=False)

    assert usage.prompt_tokens_details.cached_tokens == 0


def test_each_credential_and_model_is_its_own_conversation(
    direct_gpt: openai.OpenAI, served: RunningFake
) -> None:
    chat_usage(direct_gpt, chat_history(1), stream=False)
    other = openai.OpenAI(api_key="k-cache-other", base_url=served.url + "/v1", max_retries=0)
    other_model = direct_gpt.chat.completions.create(model="gpt-4o-mini", messages=chat_history(2))

    assert chat_usage(other, chat_history(2), stream=False).prompt_tokens_details.cached_tokens == 0
    assert other_model.usage is not None
    assert other_model.usage.prompt_tokens_details is not None
    assert other_model.usage.prompt_tokens_details.cached_tokens == 0
    # The key's own conversation still continues from its last gpt-4o request.
    assert chat_usage(direct_gpt, chat_history(3), stream=False).prompt_tokens_details.cached_tokens


def test_explicit_knobs_win_and_computing_can_be_turned_off(
    direct_gpt: openai.OpenAI, served: RunningFake
) -> None:
    chat_usage(direct_gpt, chat_history(1), stream=False)
    knob = direct_gpt.chat.completions.create(
        model="gpt-4o", messages=chat_history(2), extra_headers={"x-fake-cached": "7"}
    )
    off = direct_gpt.chat.completions.create(
        model="gpt-4o", messages=chat_history(3), extra_headers={"x-fake-compute-cache": "0"}
    )
    computed = chat_usage(direct_gpt, chat_history(4), stream=False)

    assert knob.usage is not None
    assert knob.usage.prompt_tokens_details is not None
    assert knob.usage.prompt_tokens_details.cached_tokens == 7
    # The knob's tokens come on top of the body's, as before.
    assert knob.usage.prompt_tokens == len(served.fake.requests[-3].body) // 4 + 7
    assert off.usage is not None
    assert off.usage.prompt_tokens_details is not None
    assert off.usage.prompt_tokens_details.cached_tokens == 0
    # Requests answered by the knob or with computing off still count as the previous one.
    assert computed.prompt_tokens_details.cached_tokens == automatic_cached(*bodies(served.fake))


# ------------------------------------------------------------------------ Anthropic


def anthropic_usage(client: anthropic.Anthropic, stream: bool, **params: Any) -> Any:
    params = {"model": "claude-sonnet-4-5", "max_tokens": 50, **params}
    if not stream:
        return client.messages.create(**params).usage
    with client.messages.stream(**params) as events:
        return events.get_final_message().usage


def marked_system() -> list[Any]:
    return [{"type": "text", "text": LONG, "cache_control": EPHEMERAL}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_writes_the_marked_prefix_then_reads_it(
    direct_claude: anthropic.Anthropic, served: RunningFake, stream: bool
) -> None:
    first_messages: list[Any] = [{"role": "user", "content": "question 0"}]
    first = anthropic_usage(direct_claude, stream, system=marked_system(), messages=first_messages)
    system_mark = mark_tokens(served.fake.requests[-1].json, marked_system()[0])
    last_block = {"type": "text", "text": "question 1", "cache_control": EPHEMERAL}
    messages = [
        *first_messages,
        {"role": "assistant", "content": "answer 0"},
        {"role": "user", "content": [last_block]},
    ]
    second = anthropic_usage(direct_claude, stream, system=marked_system(), messages=messages)

    body = served.fake.requests[-1].json
    assert system_mark >= 1024
    assert (first.cache_read_input_tokens, first.cache_creation_input_tokens) == (0, system_mark)
    assert second.cache_read_input_tokens == system_mark
    # Written: the marked prefix up to the last mark, minus what was read.
    assert second.cache_creation_input_tokens == mark_tokens(body, last_block) - system_mark
    cached = second.cache_read_input_tokens + second.cache_creation_input_tokens
    assert second.input_tokens == len(served.fake.requests[-1].body) // 4 - cached


def test_anthropic_caches_nothing_without_a_mark(
    direct_claude: anthropic.Anthropic, served: RunningFake
) -> None:
    first: list[Any] = [{"role": "user", "content": LONG}]
    anthropic_usage(direct_claude, False, messages=first)
    again = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    usage = anthropic_usage(direct_claude, False, messages=again)

    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)
    assert usage.input_tokens == len(served.fake.requests[-1].body) // 4


def test_anthropic_reads_nothing_when_the_marked_prefix_changed(
    direct_claude: anthropic.Anthropic, served: RunningFake
) -> None:
    anthropic_usage(direct_claude, False, system=marked_system(), messages=[_user("q")])
    changed = [{"type": "text", "text": LONG + " One more fact.", "cache_control": EPHEMERAL}]
    usage = anthropic_usage(direct_claude, False, system=changed, messages=[_user("q")])

    assert usage.cache_read_input_tokens == 0
    assert usage.cache_creation_input_tokens == mark_tokens(
        served.fake.requests[-1].json, changed[0]
    )


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# -------------------------------------------------------------- through the proxy


def ledger_row(log: RequestLog) -> LLMCall:
    return LLMCall.objects.get(request_id=log.request_id)


def assert_ledger_prices(log: RequestLog, call: LLMCall, *, read: int, write: int) -> None:
    assert (log.cached_tokens, call.cached_tokens, call.cache_write_tokens) == (read, read, write)
    expected = call_cost(
        price_lookup(log.model),
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
    assert call.cost == log.cost == expected
    uncached = call_cost(
        price_lookup(log.model), input_tokens=call.input_tokens, output_tokens=call.output_tokens
    )
    if read:
        assert expected < uncached


@pytest.mark.usefixtures("orm")
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_cache_usage_reaches_the_ledger(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    block = {"type": "text", "text": LONG, "cache_control": EPHEMERAL}
    first_messages: list[Any] = [{"role": "user", "content": [block]}]
    headers = {"x-vc-session": "cache-e2e"}
    first = anthropic_usage(claude, stream, messages=first_messages, extra_headers=headers)
    mark = mark_tokens(fake.requests[-1].json, block)
    messages = [*first_messages, {"role": "assistant", "content": "ok"}, _user("and then?")]
    second = anthropic_usage(claude, stream, messages=messages, extra_headers=headers)

    assert mark >= 1024
    assert (first.cache_read_input_tokens, first.cache_creation_input_tokens) == (0, mark)
    assert (second.cache_read_input_tokens, second.cache_creation_input_tokens) == (mark, 0)
    logs = requests_of(proxy_key, 2)
    assert [log.stream for log in logs] == [stream, stream]
    calls = [ledger_row(log) for log in logs]
    assert_ledger_prices(logs[0], calls[0], read=0, write=mark)
    assert_ledger_prices(logs[1], calls[1], read=mark, write=0)
    assert calls[1].input_tokens == len(fake.requests[-1].body) // 4
    assert calls[1].cost > Decimal(0)


@pytest.mark.usefixtures("orm")
@pytest.mark.parametrize("stream", [False, True])
def test_chat_cache_usage_reaches_the_ledger(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    chat_usage(gpt, chat_history(1), stream)
    usage = chat_usage(gpt, chat_history(2), stream)

    expected = automatic_cached(*bodies(fake))
    assert expected >= 1024
    assert usage.prompt_tokens_details.cached_tokens == expected
    logs = requests_of(proxy_key, 2)
    calls = [ledger_row(log) for log in logs]
    assert_ledger_prices(logs[0], calls[0], read=0, write=0)
    assert_ledger_prices(logs[1], calls[1], read=expected, write=0)
    assert calls[1].input_tokens == len(fake.requests[-1].body) // 4


def test_anthropic_reads_an_entry_whose_mark_moved_on_to_a_later_block() -> None:
    """As a client marking its latest message each turn does: request 2 marks a
    later block than request 1 did, and still reads what request 1 wrote."""
    from tests.fakes.provider import cache_use, prompt_of

    mark = {"type": "ephemeral"}
    long_text = "Fact: the parcel left the depot on time. " * 200  # ~2,000 tokens
    first = {
        "system": [{"type": "text", "text": "S"}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": long_text, "cache_control": mark}],
            }
        ],
    }
    second = {
        "system": [{"type": "text", "text": "S"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": long_text}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": mark}]},
        ],
    }
    use = cache_use("anthropic", prompt_of(first, marked=True), prompt_of(second, marked=True))
    assert use.read == mark_tokens(first, first["messages"][0]["content"][0]) >= 1_024
    assert use.write == mark_tokens(second, second["messages"][-1]["content"][0]) - use.read
