"""The fake provider, driven through the official SDKs pointed straight at it.

If these pass, the SDKs parse the fake's replies, streams and errors as they
parse the real APIs', so tests of the proxy can trust what the fake says.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.fakes.provider import FakeProvider, RunningFake, start_fake_provider

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
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


@pytest.fixture(scope="module")
def running() -> Iterator[RunningFake]:
    with start_fake_provider() as served:
        yield served


@pytest.fixture(autouse=True)
def fake(running: RunningFake) -> FakeProvider:
    """The served fake, with recordings cleared and knobs at their defaults."""
    running.fake.reset()
    return running.fake


@pytest.fixture
def claude(running: RunningFake) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k-ant", base_url=running.url, max_retries=0)


@pytest.fixture
def gpt(running: RunningFake) -> openai.OpenAI:
    return openai.OpenAI(api_key="k-oai", base_url=running.url + "/v1", max_retries=0)


@pytest.fixture
def gemini(running: RunningFake) -> genai.Client:
    return genai.Client(api_key="k-gem", http_options=types.HttpOptions(base_url=running.url))


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# ------------------------------------------------------------------------ Anthropic


def test_anthropic_create_echoes_last_user_message_with_usage(
    claude: anthropic.Anthropic, fake: FakeProvider
) -> None:
    messages: Any = [*user("first"), {"role": "assistant", "content": "ok"}, *user("hello there")]
    message = claude.messages.create(model="claude-x", max_tokens=50, messages=messages)

    recorded = fake.requests[-1]
    assert message.content[0].type == "text"
    assert message.content[0].text == "Echo: hello there"
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-x"
    assert message.usage.input_tokens == len(recorded.body) // 4
    assert message.usage.output_tokens == 3
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    assert (recorded.method, recorded.path) == ("POST", "/v1/messages")
    assert recorded.json["messages"][-1]["content"] == "hello there"
    assert "anthropic-version" in recorded.headers
    # anthropic 2.x sends the key as a Bearer token, older versions as x-api-key.
    assert recorded.auth in (("authorization",), ("x-api-key",), ("x-api-key", "authorization"))


def test_anthropic_stream_yields_word_deltas_and_final_usage(
    claude: anthropic.Anthropic, fake: FakeProvider
) -> None:
    fake.cached_tokens = 100
    fake.cache_creation_tokens = 7
    with claude.messages.stream(
        model="claude-x", max_tokens=50, messages=user("one two three")
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()

    assert pieces == ["Echo: ", "one ", "two ", "three"]
    assert final.content[0].type == "text"
    assert final.content[0].text == "Echo: one two three"
    assert final.stop_reason == "end_turn"
    assert final.usage.cache_read_input_tokens == 100
    assert final.usage.cache_creation_input_tokens == 7
    assert final.usage.input_tokens == len(fake.requests[-1].body) // 4
    assert final.usage.output_tokens == 4
    assert fake.requests[-1].json["stream"] is True


def test_anthropic_stream_sends_the_documented_event_sequence(
    running: RunningFake, fake: FakeProvider
) -> None:
    body = {"model": "m", "max_tokens": 9, "stream": True, "messages": user("a b")}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    response = httpx.post(running.url + "/v1/messages", json=body, headers=headers)

    events = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_anthropic_count_tokens(claude: anthropic.Anthropic, fake: FakeProvider) -> None:
    count = claude.messages.count_tokens(model="claude-x", messages=user("how many?"))

    assert count.input_tokens == len(fake.requests[-1].body) // 4
    assert fake.requests[-1].path == "/v1/messages/count_tokens"


def test_anthropic_tool_use_reply(claude: anthropic.Anthropic, fake: FakeProvider) -> None:
    message = claude.messages.create(
        model="m", max_tokens=50, tools=ANTHROPIC_TOOLS, messages=user("please use tool")
    )

    block = message.content[0]
    assert message.stop_reason == "tool_use"
    assert block.type == "tool_use"
    assert (block.name, block.input) == ("search", {"q": "test"})


def test_anthropic_tool_use_streamed_as_input_json_deltas(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="m", max_tokens=50, tools=ANTHROPIC_TOOLS, messages=user("Use tool now")
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()

    block = final.content[0]
    assert kinds.count("input_json") == 2
    assert final.stop_reason == "tool_use"
    assert block.type == "tool_use"
    assert block.input == {"q": "test"}


def test_anthropic_tool_result_turn_gets_a_text_reply(claude: anthropic.Anthropic) -> None:
    messages: Any = [
        *user("use tool"),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}],
        },
    ]
    message = claude.messages.create(
        model="m", max_tokens=50, tools=ANTHROPIC_TOOLS, messages=messages
    )

    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert message.content[0].text == "Echo: 42"


def test_anthropic_accepts_base64_images(claude: anthropic.Anthropic) -> None:
    image = {"type": "base64", "media_type": "image/png", "data": PNG}
    content: Any = [{"type": "image", "source": image}, {"type": "text", "text": "what is it"}]
    message = claude.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": content}]
    )

    assert message.content[0].type == "text"
    assert message.content[0].text == "Echo: what is it"


def test_base_url_with_a_path_prefix_works(running: RunningFake, fake: FakeProvider) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=running.url + "/v/vk_123", max_retries=0)
    message = client.messages.create(model="m", max_tokens=5, messages=user("hi"))

    assert message.content[0].type == "text"
    assert message.content[0].text == "Echo: hi"
    assert fake.requests[-1].path == "/v/vk_123/v1/messages"


# ---------------------------------------------------------------------- OpenAI chat


def test_chat_create_echoes_with_cached_tokens_from_header(
    gpt: openai.OpenAI, fake: FakeProvider
) -> None:
    completion = gpt.chat.completions.create(
        model="gpt-x",
        messages=[{"role": "system", "content": "be brief"}, *user("hello")],
        extra_headers={"x-fake-cached": "12"},
    )

    recorded = fake.requests[-1]
    usage = completion.usage
    assert completion.choices[0].message.content == "Echo: hello"
    assert completion.choices[0].finish_reason == "stop"
    assert usage is not None
    assert usage.prompt_tokens == len(recorded.body) // 4 + 12
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 12
    assert usage.completion_tokens == 2
    assert recorded.path == "/v1/chat/completions"
    assert recorded.auth == ("authorization",)
    assert recorded.headers["authorization"] == "Bearer k-oai"


def test_chat_stream_with_include_usage_ends_with_a_usage_chunk(
    gpt: openai.OpenAI, fake: FakeProvider
) -> None:
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-x",
            messages=user("one two"),
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert text == "Echo: one two"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_include_usage_sends_no_usage(gpt: openai.OpenAI) -> None:
    chunks = list(gpt.chat.completions.create(model="gpt-x", messages=user("hi"), stream=True))

    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


def test_chat_tool_call_is_streamed_as_argument_deltas(gpt: openai.OpenAI) -> None:
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-x", messages=user("use tool please"), tools=CHAT_TOOLS, stream=True
        )
    )

    calls = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].id
    assert calls[0].function is not None
    assert calls[0].function.name == "search"
    assert (
        "".join(call.function.arguments or "" for call in calls if call.function) == '{"q": "test"}'
    )
    assert len(calls) == 3
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_chat_stream_helper_assembles_the_tool_call(gpt: openai.OpenAI) -> None:
    with gpt.chat.completions.stream(
        model="gpt-x", messages=user("use tool"), tools=CHAT_TOOLS
    ) as stream:
        completion = stream.get_final_completion()

    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("search", {"q": "test"})


def test_chat_accepts_data_uri_images(gpt: openai.OpenAI) -> None:
    content: Any = [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    completion = gpt.chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": content}]
    )

    assert completion.choices[0].message.content == "Echo: describe"


def test_models_list(gpt: openai.OpenAI, fake: FakeProvider) -> None:
    models = gpt.models.list()

    assert [m.id for m in models] == ["fake-small", "fake-large"]
    assert (fake.requests[-1].method, fake.requests[-1].path) == ("GET", "/v1/models")


# ----------------------------------------------------------------- OpenAI Responses


def test_responses_create_echoes_with_usage(gpt: openai.OpenAI, fake: FakeProvider) -> None:
    fake.cached_tokens = 5
    response = gpt.responses.create(model="gpt-x", instructions="be brief", input="hi there")

    assert response.output_text == "Echo: hi there"
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens == len(fake.requests[-1].body) // 4 + 5
    assert response.usage.input_tokens_details.cached_tokens == 5
    assert response.usage.output_tokens == 3
    assert fake.requests[-1].path == "/v1/responses"


def test_responses_stream_sends_the_documented_event_sequence(gpt: openai.OpenAI) -> None:
    events = list(
        gpt.responses.create(model="gpt-x", input=[{"role": "user", "content": "a b"}], stream=True)
    )

    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(deltas) == "Echo: a b"
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Echo: a b"


def test_responses_stream_helper_builds_the_final_response(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(model="gpt-x", input="hello stream") as stream:
        response = stream.get_final_response()

    assert response.output_text == "Echo: hello stream"


def test_responses_function_call_streamed(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(model="gpt-x", input="use tool", tools=RESPONSES_TOOLS) as stream:
        kinds = [event.type for event in stream]
        response = stream.get_final_response()

    item = response.output[0]
    assert kinds.count("response.function_call_arguments.delta") == 2
    assert item.type == "function_call"
    assert (item.name, json.loads(item.arguments)) == ("search", {"q": "test"})


def test_responses_function_call_output_gets_a_text_reply(gpt: openai.OpenAI) -> None:
    items: Any = [
        {"role": "user", "content": "use tool"},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]
    response = gpt.responses.create(model="gpt-x", input=items, tools=RESPONSES_TOOLS)

    assert response.output[0].type == "message"
    assert response.output_text == "Echo: use tool"


# --------------------------------------------------------------------------- Gemini


@pytest.mark.parametrize("api_version", [None, "v1beta"])
def test_gemini_generate_content_on_v1_and_v1beta(
    running: RunningFake, fake: FakeProvider, api_version: str | None
) -> None:
    options = types.HttpOptions(base_url=running.url, api_version=api_version)
    client = genai.Client(api_key="k-gem", http_options=options)
    response = client.models.generate_content(model="gemini-x", contents="hello gem")

    recorded = fake.requests[-1]
    assert response.text == "Echo: hello gem"
    assert response.usage_metadata is not None
    assert response.usage_metadata.prompt_token_count == len(recorded.body) // 4
    assert response.usage_metadata.candidates_token_count == 3
    assert response.usage_metadata.cached_content_token_count == 0
    # google-genai 3.x defaults to /v1/, older releases (and api_version) /v1beta/.
    assert recorded.path == f"/{api_version or 'v1'}/models/gemini-x:generateContent"
    assert recorded.auth == ("x-goog-api-key",)


def test_gemini_stream_is_sse_with_usage_in_the_last_chunk(
    gemini: genai.Client, fake: FakeProvider
) -> None:
    fake.cached_tokens = 30
    chunks = list(gemini.models.generate_content_stream(model="gemini-x", contents="one two"))

    last = chunks[-1]
    assert [c.text for c in chunks] == ["Echo: ", "one ", "two"]
    assert all(c.usage_metadata is None for c in chunks[:-1])
    assert last.usage_metadata is not None
    assert last.usage_metadata.cached_content_token_count == 30
    assert last.candidates is not None
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert fake.requests[-1].query == "alt=sse"
    assert fake.requests[-1].path.endswith("/models/gemini-x:streamGenerateContent")


def test_gemini_function_call(gemini: genai.Client) -> None:
    schema = types.Schema(
        type=types.Type.OBJECT, properties={"q": types.Schema(type=types.Type.STRING)}
    )
    declaration = types.FunctionDeclaration(name="search", parameters=schema)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[declaration])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    response = gemini.models.generate_content(model="gemini-x", contents="use tool", config=config)

    assert response.function_calls is not None
    assert response.function_calls[0].name == "search"
    assert response.function_calls[0].args == {"q": "test"}


def test_gemini_accepts_inline_images(gemini: genai.Client) -> None:
    image = types.Part.from_bytes(data=base64.b64decode(PNG), mime_type="image/png")
    contents: Any = [image, "what is it"]
    response = gemini.models.generate_content(model="gemini-x", contents=contents)

    assert response.text == "Echo: what is it"


def test_gemini_stream_without_alt_is_a_json_array(running: RunningFake) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "x y"}]}]}
    url = running.url + "/v1beta/models/gemini-x:streamGenerateContent?key=k"
    response = httpx.post(url, json=body)

    chunks = json.loads(response.text)
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "Echo: x y"
    assert "usageMetadata" in chunks[-1]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (529, anthropic.OverloadedError),
        (500, anthropic.InternalServerError),
        (400, anthropic.BadRequestError),
    ],
)
def test_fail_next_makes_anthropic_raise_its_status_error(
    claude: anthropic.Anthropic, fake: FakeProvider, status: int, error: type[Exception]
) -> None:
    fake.fail_next(status)
    with pytest.raises(error) as raised:
        claude.messages.create(model="m", max_tokens=5, messages=user("x"))

    assert isinstance(raised.value, anthropic.APIStatusError)
    assert raised.value.status_code == status
    assert raised.value.body["type"] == "error"  # type: ignore[index]
    assert claude.messages.create(model="m", max_tokens=5, messages=user("x")).id


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (529, openai.InternalServerError),
        (500, openai.InternalServerError),
        (400, openai.BadRequestError),
    ],
)
def test_fail_next_makes_openai_raise_its_status_error(
    gpt: openai.OpenAI, fake: FakeProvider, status: int, error: type[openai.APIStatusError]
) -> None:
    fake.fail_next(status)
    with pytest.raises(error) as raised:
        gpt.chat.completions.create(model="m", messages=user("x"), stream=True)

    assert raised.value.status_code == status
    assert raised.value.body["message"] == f"Fake failure {status}."  # type: ignore[index]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (529, genai_errors.ServerError),
        (500, genai_errors.ServerError),
        (400, genai_errors.ClientError),
    ],
)
def test_fail_next_makes_gemini_raise_its_api_error(
    gemini: genai.Client, fake: FakeProvider, status: int, error: type[genai_errors.APIError]
) -> None:
    fake.fail_next(status)
    with pytest.raises(error) as raised:
        gemini.models.generate_content(model="gemini-x", contents="x")

    assert raised.value.code == status


def test_status_header_fails_every_request_carrying_it(gpt: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError):
        gpt.responses.create(model="m", input="x", extra_headers={"x-fake-status": "429"})
    with pytest.raises(openai.RateLimitError):
        gpt.responses.create(model="m", input="x", extra_headers={"x-fake-status": "429"})


def test_fail_next_times_outlasts_sdk_retries(running: RunningFake, fake: FakeProvider) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=running.url, max_retries=1)
    fake.fail_next(503, times=2)
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(model="m", max_tokens=5, messages=user("x"))

    assert len(fake.requests) == 2


def test_custom_failure_body_is_sent_verbatim(gpt: openai.OpenAI, fake: FakeProvider) -> None:
    fake.fail_next(403, {"error": {"message": "custom", "type": "x"}})
    with pytest.raises(openai.PermissionDeniedError) as raised:
        gpt.models.list()

    assert raised.value.body == {"message": "custom", "type": "x"}


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/messages", {"type": "error", "error": {"type": "authentication_error"}}),
        ("/v1/chat/completions", {"error": {"code": "invalid_api_key"}}),
        ("/v1beta/models/g:generateContent", {"error": {"code": 401, "status": "UNAUTHENTICATED"}}),
    ],
)
def test_requests_without_a_credential_get_the_provider_401(
    running: RunningFake, fake: FakeProvider, path: str, shape: dict[str, Any]
) -> None:
    response = httpx.post(running.url + path, json={"messages": user("x")})

    body = response.json()
    assert response.status_code == 401
    assert body == _merge(body, shape)
    assert fake.requests[-1].auth == ()


def test_an_sdk_without_a_key_sees_the_401(running: RunningFake) -> None:
    client = openai.OpenAI(api_key="k", base_url=running.url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(
            model="m", messages=user("x"), extra_headers={"Authorization": openai.Omit()}
        )

    assert raised.value.code == "invalid_api_key"


def test_unknown_path_is_a_json_404(running: RunningFake) -> None:
    response = httpx.post(running.url + "/v1/nothing", headers={"authorization": "Bearer k"})

    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Unknown path POST /v1/nothing"


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return merged


# -------------------------------------------------------------------- stream faults


def test_break_stream_after_cuts_an_anthropic_stream(
    claude: anthropic.Anthropic, fake: FakeProvider
) -> None:
    fake.break_stream_after = 2
    pieces: list[str] = []
    # The SDK lets the transport error through unwrapped.
    with (
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)),
        claude.messages.stream(model="m", max_tokens=9, messages=user("a b c d")) as stream,
    ):
        pieces.extend(stream.text_stream)

    assert pieces == ["Echo: ", "a "]


def test_break_header_cuts_an_openai_chat_stream(gpt: openai.OpenAI) -> None:
    pieces: list[str] = []
    stream = gpt.chat.completions.create(
        model="m", messages=user("a b c d"), stream=True, extra_headers={"x-fake-break-after": "1"}
    )
    with pytest.raises(openai.APIConnectionError):
        pieces.extend(c.choices[0].delta.content or "" for c in stream)

    assert "".join(pieces) == "Echo: "


def test_break_stream_after_cuts_a_responses_stream(gpt: openai.OpenAI, fake: FakeProvider) -> None:
    fake.break_stream_after = 0
    kinds: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        kinds.extend(e.type for e in gpt.responses.create(model="m", input="a b", stream=True))

    assert "response.completed" not in kinds
    assert "response.output_text.delta" not in kinds


def test_break_stream_after_cuts_a_gemini_stream(gemini: genai.Client, fake: FakeProvider) -> None:
    fake.break_stream_after = 1
    texts: list[str | None] = []
    with pytest.raises((httpx2.RemoteProtocolError, httpx.RemoteProtocolError)):
        texts.extend(
            c.text for c in gemini.models.generate_content_stream(model="g", contents="a b")
        )

    assert texts == ["Echo: "]


def test_stream_delay_spreads_the_deltas_over_separate_body_chunks(running: RunningFake) -> None:
    body = {"model": "m", "max_tokens": 9, "stream": True, "messages": user("a b c")}
    headers = {"x-api-key": "k", "x-fake-delay": "0.05"}
    arrivals: list[float] = []
    start = time.monotonic()
    with httpx.stream("POST", running.url + "/v1/messages", json=body, headers=headers) as response:
        for chunk in response.iter_raw():
            if b"content_block_delta" in chunk:
                arrivals.append(time.monotonic() - start)

    assert len(arrivals) == 4
    assert arrivals[-1] >= 0.2
    assert arrivals[-1] - arrivals[0] >= 0.14


def test_reply_text_knob_and_reset(claude: anthropic.Anthropic, fake: FakeProvider) -> None:
    fake.reply_text = "fixed answer"
    first = claude.messages.create(model="m", max_tokens=9, messages=user("x"))
    second = claude.messages.create(
        model="m", max_tokens=9, messages=user("x"), extra_headers={"x-fake-reply": "from header"}
    )
    fake.reset()

    assert first.content[0].type == second.content[0].type == "text"
    assert first.content[0].text == "fixed answer"
    assert second.content[0].text == "from header"
    assert fake.requests == []
    assert fake.reply_text is None
