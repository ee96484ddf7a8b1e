"""Every provider call through the real proxy process, driven by the official SDKs.

Each test checks the three sides of one call: what the SDK returned, what the
fake provider received (path, the client's own credential), and what the proxy
stored (turns, a request log row and a ledger row with the provider's usage
and its cost from the price catalog).
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from memory_app.models import Turn
from telemetry_app.models import Component, LLMCall, RequestLog
from telemetry_app.pricing import call_cost, price_lookup
from tests.fakes.provider import FakeProvider, Recorded
from tests.proxy_app.conftest import (
    ANTHROPIC_SECRET,
    GEMINI_SECRET,
    OPENAI_SECRET,
    ProxyKey,
    wait_for,
)
from vcloud.accounts.models import VCKey

pytestmark = [
    pytest.mark.usefixtures("orm"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

PNG_BYTES = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)
PNG = base64.b64encode(PNG_BYTES).decode()
MARKER_START = "\n\n<!-- vc:"

ANTHROPIC_TOOLS: Any = [
    {
        "name": "search",
        "description": "Search the web.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]
CHAT_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS: Any = [
    {
        "type": "function",
        "name": "search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "strict": False,
    }
]


# -------------------------------------------------------------------------- helpers


def requests_of(proxy_key: ProxyKey, count: int = 1) -> list[RequestLog]:
    """The account's request log rows, oldest first, once ``count`` are stored."""
    rows = wait_for(
        lambda: (
            found
            if len(found := list(RequestLog.objects.filter(account=proxy_key.account))) >= count
            else None
        )
    )
    assert rows, f"expected {count} request log rows, the writer stored fewer"
    return sorted(rows, key=lambda r: (r.created_at, r.pk))


def turns_of(conversation_id: int | None) -> list[tuple[int, str, str]]:
    """(position, role, text) of the conversation's active turns."""
    assert conversation_id is not None
    return list(
        Turn.objects.filter(conversation_id=conversation_id, replaced=False)
        .order_by("position")
        .values_list("position", "role", "text")
    )


def assert_usage_recorded(
    log: RequestLog,
    recorded: Recorded,
    *,
    model: str,
    provider: str,
    cached: int,
    output: int,
) -> None:
    """The log and ledger rows carry the fake's usage and the catalog's cost."""
    prompt = len(recorded.body) // 4 + cached  # the fake: uncached = body bytes // 4
    expected_cost = call_cost(
        price_lookup(model), input_tokens=prompt, output_tokens=output, cache_read_tokens=cached
    )
    assert log.status == 200
    assert log.error == ""
    assert log.model == model
    assert (log.upstream_tokens, log.cached_tokens, log.output_tokens) == (prompt, cached, output)
    assert expected_cost > 0
    assert log.cost == expected_cost
    call = LLMCall.objects.get(request_id=log.request_id)
    assert call.component == Component.PROXY_UPSTREAM
    assert (call.provider, call.model) == (provider, model)
    assert (call.input_tokens, call.cached_tokens, call.output_tokens) == (prompt, cached, output)
    assert call.cost == expected_cost
    assert call.priced is True
    assert call.conversation_id == log.conversation_id


def without_marker(text: str) -> str:
    assert MARKER_START in text, f"no session marker in {text!r}"
    head, _, tail = text.partition(MARKER_START)
    assert tail.endswith(" -->"), text
    return head


# ---------------------------------------------------------------- Anthropic calls


def test_anthropic_create_is_answered_forwarded_with_the_key_and_recorded_with_usage_and_cost(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=50,
        system="be brief",
        messages=[{"role": "user", "content": "hello proxy"}],
        extra_headers={"x-fake-cached": "40"},
    )

    block = message.content[0]
    assert block.type == "text"
    assert without_marker(block.text) == "Echo: hello proxy"
    assert message.usage.cache_read_input_tokens == 40
    recorded = fake.requests[-1]
    assert (recorded.method, recorded.path) == ("POST", "/v1/messages")
    assert recorded.headers["authorization"] == f"Bearer {ANTHROPIC_SECRET}"
    assert recorded.json["system"] == "be brief"
    [log] = requests_of(proxy_key)
    assert (log.format, log.path, log.stream) == ("anthropic", "/v1/messages", False)
    assert_usage_recorded(
        log, recorded, model="claude-sonnet-4-5", provider="anthropic", cached=40, output=3
    )
    assert turns_of(log.conversation_id) == [
        (0, "user", "hello proxy"),
        (1, "assistant", "Echo: hello proxy"),
    ]
    key = VCKey.objects.get(account=proxy_key.account)
    assert key.request_count == 1
    assert key.last_used_at is not None


def test_anthropic_stream_relays_text_deltas_and_records_the_final_usage(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=50,
        messages=[{"role": "user", "content": "one two three"}],
        extra_headers={"x-fake-cached": "25"},
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()

    assert pieces[:4] == ["Echo: ", "one ", "two ", "three"]
    assert without_marker("".join(pieces)) == "Echo: one two three"
    assert final.stop_reason == "end_turn"
    assert final.usage.cache_read_input_tokens == 25
    texts = [b.text for b in final.content if b.type == "text"]
    assert texts[0] == "Echo: one two three"
    recorded = fake.requests[-1]
    assert recorded.path == "/v1/messages"
    assert recorded.json["stream"] is True
    assert recorded.headers["authorization"] == f"Bearer {ANTHROPIC_SECRET}"
    [log] = requests_of(proxy_key)
    assert log.stream is True
    assert_usage_recorded(
        log, recorded, model="claude-sonnet-4-5", provider="anthropic", cached=25, output=4
    )
    assert turns_of(log.conversation_id) == [
        (0, "user", "one two three"),
        (1, "assistant", "Echo: one two three"),
    ]


def test_anthropic_count_tokens_is_relayed_and_logged_without_a_ledger_row(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    count = claude.messages.count_tokens(
        model="claude-sonnet-4-5", messages=[{"role": "user", "content": "how many?"}]
    )

    recorded = fake.requests[-1]
    assert count.input_tokens == len(recorded.body) // 4
    assert recorded.path == "/v1/messages/count_tokens"
    assert recorded.headers["authorization"] == f"Bearer {ANTHROPIC_SECRET}"
    [log] = requests_of(proxy_key)
    assert (log.path, log.status, log.conversation_id) == ("/v1/messages/count_tokens", 200, None)
    assert not LLMCall.objects.filter(request_id=log.request_id).exists()


# ------------------------------------------------------------------- OpenAI calls


def test_chat_completion_is_answered_and_recorded_with_cached_tokens(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    completion = gpt.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi gpt"}],
        extra_headers={"x-fake-cached": "12"},
    )

    content = completion.choices[0].message.content
    assert content is not None
    assert without_marker(content) == "Echo: hi gpt"
    recorded = fake.requests[-1]
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    assert recorded.json["messages"][0] == {"role": "system", "content": "be brief"}
    [log] = requests_of(proxy_key)
    assert (log.format, log.stream) == ("openai_chat", False)
    assert_usage_recorded(log, recorded, model="gpt-4o", provider="openai", cached=12, output=3)
    assert turns_of(log.conversation_id) == [
        (0, "user", "hi gpt"),
        (1, "assistant", "Echo: hi gpt"),
    ]


def test_chat_stream_with_include_usage_is_relayed_and_recorded(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "stream me"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-fake-cached": "7"},
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert without_marker(text) == "Echo: stream me"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    recorded = fake.requests[-1]
    assert recorded.json["stream"] is True
    assert recorded.json["stream_options"] == {"include_usage": True}
    assert recorded.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    [log] = requests_of(proxy_key)
    assert log.stream is True
    assert_usage_recorded(log, recorded, model="gpt-4o", provider="openai", cached=7, output=3)
    assert turns_of(log.conversation_id) == [
        (0, "user", "stream me"),
        (1, "assistant", "Echo: stream me"),
    ]


def test_responses_create_is_answered_and_recorded(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    response = gpt.responses.create(
        model="gpt-4o",
        instructions="be brief",
        input="hello responses",
        extra_headers={"x-fake-cached": "5"},
    )

    assert without_marker(response.output_text) == "Echo: hello responses"
    recorded = fake.requests[-1]
    assert recorded.path == "/v1/responses"
    assert recorded.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    assert recorded.json["instructions"] == "be brief"
    [log] = requests_of(proxy_key)
    assert (log.format, log.stream) == ("openai_responses", False)
    assert_usage_recorded(log, recorded, model="gpt-4o", provider="openai", cached=5, output=3)
    assert turns_of(log.conversation_id) == [
        (0, "user", "hello responses"),
        (1, "assistant", "Echo: hello responses"),
    ]


def test_responses_stream_is_relayed_event_by_event_and_recorded(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    events = list(
        gpt.responses.create(
            model="gpt-4o",
            input=[{"role": "user", "content": "a b c"}],
            stream=True,
            extra_headers={"x-fake-cached": "3"},
        )
    )

    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas).startswith("Echo: a b c")
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text.startswith("Echo: a b c")
    recorded = fake.requests[-1]
    assert recorded.json["stream"] is True
    assert recorded.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    [log] = requests_of(proxy_key)
    assert log.stream is True
    assert_usage_recorded(log, recorded, model="gpt-4o", provider="openai", cached=3, output=4)
    assert turns_of(log.conversation_id) == [(0, "user", "a b c"), (1, "assistant", "Echo: a b c")]


def test_models_list_is_relayed_and_logged_without_a_ledger_row(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    models = gpt.models.list()

    assert [m.id for m in models] == ["fake-small", "fake-large"]
    recorded = fake.requests[-1]
    assert (recorded.method, recorded.path) == ("GET", "/v1/models")
    assert recorded.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    [log] = requests_of(proxy_key)
    assert (log.path, log.status, log.conversation_id) == ("/v1/models", 200, None)
    assert not LLMCall.objects.filter(request_id=log.request_id).exists()


# ------------------------------------------------------------------- Gemini calls


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_gemini_generate_content_is_answered_and_recorded_on_v1_and_v1beta(
    fake: FakeProvider, proxy_key: ProxyKey, api_version: str | None
) -> None:
    options = types.HttpOptions(base_url=proxy_key.base, api_version=api_version)
    client = genai.Client(api_key=GEMINI_SECRET, http_options=options)
    config = types.GenerateContentConfig(
        system_instruction="be brief",
        http_options=types.HttpOptions(headers={"x-fake-cached": "9"}),
    )
    response = client.models.generate_content(
        model="gemini-2.5-flash", contents="hello gem", config=config
    )

    assert response.text is not None
    assert without_marker(response.text) == "Echo: hello gem"
    recorded = fake.requests[-1]
    assert recorded.path == f"/{api_version or 'v1'}/models/gemini-2.5-flash:generateContent"
    assert recorded.headers["x-goog-api-key"] == GEMINI_SECRET
    assert recorded.json["systemInstruction"]["parts"] == [{"text": "be brief"}]
    [log] = requests_of(proxy_key)
    assert (log.format, log.stream) == ("gemini", False)
    assert_usage_recorded(
        log, recorded, model="gemini-2.5-flash", provider="gemini", cached=9, output=3
    )
    rows = turns_of(log.conversation_id)
    assert rows[0] == (0, "user", "hello gem")
    # The fake answers in one text part per word; the turn text joins parts by lines.
    assert (rows[1][0], rows[1][1], rows[1][2].replace("\n", "")) == (
        1,
        "assistant",
        "Echo: hello gem",
    )
    assert len(rows) == 2


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_gemini_stream_is_relayed_chunk_by_chunk_and_recorded(
    fake: FakeProvider, proxy_key: ProxyKey, api_version: str | None
) -> None:
    options = types.HttpOptions(base_url=proxy_key.base, api_version=api_version)
    client = genai.Client(api_key=GEMINI_SECRET, http_options=options)
    chunks = list(
        client.models.generate_content_stream(
            model="gemini-2.5-flash",
            contents="one two",
            config=types.GenerateContentConfig(
                http_options=types.HttpOptions(headers={"x-fake-cached": "11"})
            ),
        )
    )

    text = "".join(c.text or "" for c in chunks)
    assert without_marker(text) == "Echo: one two"
    assert [c.text for c in chunks][:3] == ["Echo: ", "one ", "two"]
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    assert usage
    assert usage[-1].cached_content_token_count == 11
    recorded = fake.requests[-1]
    assert recorded.path == f"/{api_version or 'v1'}/models/gemini-2.5-flash:streamGenerateContent"
    assert recorded.query == "alt=sse"
    assert recorded.headers["x-goog-api-key"] == GEMINI_SECRET
    [log] = requests_of(proxy_key)
    assert (log.format, log.stream) == ("gemini", True)
    assert_usage_recorded(
        log, recorded, model="gemini-2.5-flash", provider="gemini", cached=11, output=3
    )
    assert turns_of(log.conversation_id) == [
        (0, "user", "one two"),
        (1, "assistant", "Echo: one two"),
    ]


# ------------------------------------------------- tools, images and system prompts


def test_anthropic_tool_use_and_tool_result_round_trip_and_are_stored_once(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    history: list[Any] = [{"role": "user", "content": "please use tool"}]
    first = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=50, tools=ANTHROPIC_TOOLS, messages=history
    )
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("search", {"q": "test"})

    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}],
        },
    ]
    second = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=50, tools=ANTHROPIC_TOOLS, messages=history
    )

    assert second.content[0].type == "text"
    assert without_marker(second.content[0].text) == "Echo: 42"
    sent = fake.requests[-1].json["messages"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use"]  # marker block stripped
    assert sent[1]["content"][0]["id"] == call.id
    assert sent[2]["content"][0] == {"type": "tool_result", "tool_use_id": call.id, "content": "42"}
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    assert turns_of(second_log.conversation_id) == [
        (0, "user", "please use tool"),
        (1, "assistant", 'search({"q":"test"})'),
        (2, "user", "42"),
        (3, "assistant", "Echo: 42"),
    ]
    assert Turn.objects.filter(conversation_id=second_log.conversation_id).count() == 4


def test_chat_tool_call_and_tool_message_round_trip_and_are_stored_once(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    history: list[Any] = [{"role": "user", "content": "use tool now"}]
    first = gpt.chat.completions.create(model="gpt-4o", tools=CHAT_TOOLS, messages=history)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    [call] = message.tool_calls
    assert call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "test"})

    history += [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "forty-two"},
    ]
    second = gpt.chat.completions.create(model="gpt-4o", tools=CHAT_TOOLS, messages=history)

    content = second.choices[0].message.content
    assert content is not None
    assert without_marker(content) == "Echo: use tool now"  # last user text, after the result
    sent = fake.requests[-1].json["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call.id
    assert "<!-- vc:" not in json.dumps(sent)
    assert sent[2] == {"role": "tool", "tool_call_id": call.id, "content": "forty-two"}
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    rows = turns_of(second_log.conversation_id)
    assert [(p, r) for p, r, _ in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "assistant"),
    ]
    assert "search" in rows[1][2]
    assert rows[2][2] == "forty-two"
    assert Turn.objects.filter(conversation_id=second_log.conversation_id).count() == 4


def test_responses_function_call_and_output_round_trip_and_are_stored_once(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    history: list[Any] = [{"role": "user", "content": "use tool please"}]
    first = gpt.responses.create(model="gpt-4o", tools=RESPONSES_TOOLS, input=history)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("search", {"q": "test"})

    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "17"})
    second = gpt.responses.create(model="gpt-4o", tools=RESPONSES_TOOLS, input=history)

    assert without_marker(second.output_text) == "Echo: use tool please"
    sent = fake.requests[-1].json["input"]
    assert "<!-- vc:" not in json.dumps(sent)
    assert [i.get("type") for i in sent[1:]] == ["function_call", "function_call_output"]
    assert sent[-1] == {"type": "function_call_output", "call_id": call.call_id, "output": "17"}
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    rows = turns_of(second_log.conversation_id)
    assert [(p, r) for p, r, _ in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "assistant"),
    ]
    assert rows[2][2] == "17"
    assert Turn.objects.filter(conversation_id=second_log.conversation_id).count() == 4


def test_gemini_function_call_and_response_round_trip_and_are_stored_once(
    gemini: genai.Client, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    schema = types.Schema(
        type=types.Type.OBJECT, properties={"q": types.Schema(type=types.Type.STRING)}
    )
    declaration = types.FunctionDeclaration(name="search", parameters=schema)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[declaration])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    history: list[Any] = [types.Content(role="user", parts=[types.Part(text="use tool gem")])]
    first = gemini.models.generate_content(
        model="gemini-2.5-flash", contents=history, config=config
    )
    assert first.function_calls is not None
    assert (first.function_calls[0].name, first.function_calls[0].args) == ("search", {"q": "test"})
    assert first.candidates is not None
    model_turn = first.candidates[0].content
    assert model_turn is not None

    history += [
        model_turn,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="search", response={"r": "sunny"})],
        ),
    ]
    second = gemini.models.generate_content(
        model="gemini-2.5-flash", contents=history, config=config
    )

    assert second.text is not None
    assert without_marker(second.text) == "Echo: use tool gem"
    sent = fake.requests[-1].json["contents"]
    assert "<!-- vc:" not in json.dumps(sent)
    assert sent[1]["parts"] == [{"functionCall": {"name": "search", "args": {"q": "test"}}}]
    assert sent[2]["parts"][0]["functionResponse"]["response"] == {"r": "sunny"}
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    rows = turns_of(second_log.conversation_id)
    assert [(p, r) for p, r, _ in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "user"),
        (3, "assistant"),
    ]
    assert Turn.objects.filter(conversation_id=second_log.conversation_id).count() == 4


def test_anthropic_image_and_system_blocks_reach_the_provider_and_the_stored_turn(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    content: Any = [image, {"type": "text", "text": "what is it"}]
    system: Any = [{"type": "text", "text": "You describe images."}]
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=50,
        system=system,
        messages=[{"role": "user", "content": content}],
    )

    assert message.content[0].type == "text"
    assert without_marker(message.content[0].text) == "Echo: what is it"
    sent = fake.requests[-1].json
    assert sent["messages"][0]["content"] == content
    assert sent["system"] == system
    [log] = requests_of(proxy_key)
    stored = Turn.objects.get(conversation_id=log.conversation_id, position=0)
    assert stored.content["content"][0]["source"]["data"] == PNG
    assert stored.text == "what is it"


def test_chat_image_and_system_message_reach_the_provider(
    gpt: openai.OpenAI, fake: FakeProvider
) -> None:
    content: Any = [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    system = {"role": "system", "content": "You describe images."}
    completion = gpt.chat.completions.create(
        model="gpt-4o", messages=[system, {"role": "user", "content": content}]
    )

    assert without_marker(completion.choices[0].message.content or "") == "Echo: describe"
    assert fake.requests[-1].json["messages"] == [system, {"role": "user", "content": content}]


def test_responses_image_and_instructions_reach_the_provider(
    gpt: openai.OpenAI, fake: FakeProvider
) -> None:
    content: Any = [
        {"type": "input_text", "text": "what is this"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
    ]
    response = gpt.responses.create(
        model="gpt-4o",
        instructions="You describe images.",
        input=[{"role": "user", "content": content}],
    )

    assert without_marker(response.output_text) == "Echo: what is this"
    sent = fake.requests[-1].json
    assert sent["instructions"] == "You describe images."
    assert sent["input"] == [{"role": "user", "content": content}]


def test_gemini_inline_image_and_system_instruction_reach_the_provider(
    gemini: genai.Client, fake: FakeProvider
) -> None:
    image = types.Part.from_bytes(data=PNG_BYTES, mime_type="image/png")
    response = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents=[image, "what is it"],
        config=types.GenerateContentConfig(system_instruction="You describe images."),
    )

    assert without_marker(response.text or "") == "Echo: what is it"
    sent = fake.requests[-1].json
    assert sent["systemInstruction"]["parts"] == [{"text": "You describe images."}]
    parts = sent["contents"][0]["parts"]
    # google-genai spells this one field in snake case; the proxy keeps what it sent.
    inline = parts[0]["inlineData"]
    assert inline["data"] == PNG
    assert (inline.get("mimeType") or inline.get("mime_type")) == "image/png"
    assert parts[1] == {"text": "what is it"}


def test_cost_is_zero_but_usage_recorded_for_an_unpriced_model(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    claude.messages.create(
        model="fake-unpriced-model", max_tokens=9, messages=[{"role": "user", "content": "x y"}]
    )

    [log] = requests_of(proxy_key)
    call = LLMCall.objects.get(request_id=log.request_id)
    assert log.upstream_tokens == len(fake.requests[-1].body) // 4
    assert log.cost == call.cost == Decimal(0)
    assert call.priced is False


ENVELOPE = (
    "Conversation info (untrusted metadata):\n"
    "```json\n"
    '{"channel": "telegram", "timestamp": "2026-02-14T18:49:00Z"}\n'
    "```\n\n"
)


@pytest.mark.parametrize("stream", [False, True])
def test_a_channel_envelope_is_stored_but_not_forwarded(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    words = "Book the ferry to Naxos for Friday."
    messages: Any = [{"role": "user", "content": ENVELOPE + words}]
    if stream:
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=50, messages=messages
        ) as s:
            s.get_final_message()
    else:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=messages)

    assert fake.requests[-1].json["messages"][0]["content"] == words
    [log] = requests_of(proxy_key)
    stored = Turn.objects.get(conversation_id=log.conversation_id, position=0)
    assert stored.text.startswith("Conversation info (untrusted metadata)")  # verbatim
