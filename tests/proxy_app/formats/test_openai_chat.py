"""Tests of the OpenAI Chat Completions adapter (pure: no Django, no network)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy_app.formats import openai_chat as fmt
from proxy_app.formats.marker import marker_text
from proxy_app.formats.types import FormatError, Usage

MARK = marker_text("conv.abc123")


def _request() -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "reasoning_effort": "low",
        "metadata": {"k": "v"},
        "tools": [
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
        ],
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"},
                    },
                    {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                    {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE"}},
                ],
                "name": "alice",
            },
            {
                "role": "assistant",
                "content": "Let me look." + MARK,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q":"x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "result text"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Done." + MARK.replace("abc123", "z9")}],
            },
            {"role": "user", "content": "thanks"},
        ],
    }


# --------------------------------------------------------------------------- request


def test_parse_request_turns() -> None:
    body = _request()
    ex = fmt.parse_request(body)
    assert ex.format == "openai_chat"
    assert (ex.model, ex.stream) == ("gpt-4.1", True)
    assert ex.system == "You are terse.\nUse tools."
    assert ex.tools == body["tools"]
    assert ex.marker == "conv.z9"
    assert [t.role for t in ex.turns] == ["user", "assistant", "tool", "assistant", "user"]
    user, call, tool, done, last = ex.turns
    assert user.kinds == ["text", "image", "other", "document"]
    assert user.text == "What is this?"
    assert user.item is body["messages"][2]
    assert call.kinds == ["text", "tool_call"]
    assert call.text == 'Let me look.\nlookup({"q":"x"})'
    assert call.tool_call_ids == ["call_1"]
    assert call.item["content"] == "Let me look."
    assert call.item["tool_calls"] is body["messages"][3]["tool_calls"]
    assert tool.tool_result_ids == ["call_1"]
    assert tool.kinds == ["tool_result"]
    assert tool.text == "result text"
    assert done.item["content"] == [{"type": "text", "text": "Done."}]
    assert last.text == "thanks"


def test_parse_request_overrides_and_nulls() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "function", "name": "f", "content": "legacy"},
        ]
    }
    ex = fmt.parse_request(body, model="m", stream=False)
    assert (ex.model, ex.stream, ex.system) == ("m", False, "")
    assert [t.role for t in ex.turns] == ["user", "assistant", "tool"]
    assert ex.turns[1].text == ""


def test_round_trip_keeps_unknown_fields() -> None:
    body = _request()
    body["messages"][3]["content"] = "Let me look."
    body["messages"][5]["content"][0]["text"] = "Done."
    ex = fmt.parse_request(body)
    assert ex.marker is None
    out = fmt.render_request(ex)
    assert out is not body
    assert orjson.dumps(out) == orjson.dumps(body)


def test_render_does_not_mutate() -> None:
    body = _request()
    before = copy.deepcopy(body)
    ex = fmt.parse_request(body)
    out = fmt.render_request(ex, system_block="MEMORY")
    assert body == before
    assert "vc:" not in orjson.dumps(out).decode()


def test_system_block_after_client_system_messages() -> None:
    body = _request()
    out = fmt.render_request(fmt.parse_request(body), system_block="MEMORY")
    roles = [m["role"] for m in out["messages"]]
    assert roles == [
        "system",
        "developer",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert out["messages"][2] == {"role": "system", "content": "MEMORY"}
    assert out["messages"][:2] == body["messages"][:2]


def test_render_items_after_system_messages() -> None:
    ex = fmt.parse_request(_request())
    items = [{"role": "user", "content": "only"}]
    out = fmt.render_request(ex, items=items, system_block="M")
    assert out["messages"][-1] == items[0]
    assert len(out["messages"]) == 4
    assert out["reasoning_effort"] == "low"


def test_marker_only_text_part_dropped_if_others_remain() -> None:
    body = {
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": MARK}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": MARK}]},
            {"role": "user", "content": "a " + MARK},
        ]
    }
    ex = fmt.parse_request(body)
    assert ex.turns[0].item["content"] == [{"type": "text", "text": "Hi"}]
    assert ex.turns[1].item["content"] == [{"type": "text", "text": ""}]
    assert ex.turns[2].item["content"] == "a " + MARK


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {},
        {"messages": "hi"},
        {"messages": [1]},
        {"messages": [{"role": "bot", "content": "x"}]},
        {"messages": [{"content": "x"}]},
        {"messages": [{"role": "user", "content": 1}]},
        {"messages": [{"role": "user", "content": ["x"]}]},
        {"messages": [{"role": "system", "content": 1}]},
        {"messages": [], "model": 1},
    ],
)
def test_malformed_requests(body: Any) -> None:
    with pytest.raises(FormatError):
        fmt.parse_request(body)


# --------------------------------------------------------------------------- response


RESPONSE: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-4.1-2025-04-14",
    "system_fingerprint": "fp_1",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there.",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
}

TOOL_RESPONSE: dict[str, Any] = {
    **RESPONSE,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    },
                ],
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
}


def test_parse_response() -> None:
    reply = fmt.parse_response(RESPONSE)
    assert reply.items == [{"role": "assistant", "content": "Hello there."}]
    assert reply.text == "Hello there."
    assert reply.model == "gpt-4.1-2025-04-14"
    assert reply.stop_reason == "stop"
    assert reply.complete is True
    assert reply.usage == Usage(input_tokens=1200, output_tokens=30, cache_read_tokens=1024)


def test_parse_tool_response() -> None:
    reply = fmt.parse_response(TOOL_RESPONSE)
    message = TOOL_RESPONSE["choices"][0]["message"]
    assert reply.items == [
        {"role": "assistant", "content": None, "tool_calls": message["tool_calls"]}
    ]
    assert reply.tool_calls == [
        {"id": "call_a", "name": "lookup", "arguments": '{"q": "x"}'},
        {"id": "call_b", "name": "read", "arguments": "{}"},
    ]
    assert reply.stop_reason == "tool_calls"


def test_parse_error_response() -> None:
    reply = fmt.parse_response(fmt.error_body(429, "slow down"))
    assert (reply.error, reply.complete) == ("slow down", False)
    with pytest.raises(FormatError):
        fmt.parse_response("x")


def test_add_marker() -> None:
    before = copy.deepcopy(RESPONSE)
    out = fmt.add_marker(RESPONSE, MARK)
    assert before == RESPONSE
    assert out["choices"][0]["message"]["content"] == "Hello there." + MARK
    tool = fmt.add_marker(TOOL_RESPONSE, MARK)
    assert tool["choices"][0]["message"]["content"] == MARK
    assert TOOL_RESPONSE["choices"][0]["message"]["content"] is None
    assert fmt.add_marker({"choices": []}, MARK) == {"choices": []}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        (400, "invalid_request_error", None),
        (401, "invalid_request_error", "invalid_api_key"),
        (403, "request_forbidden", None),
        (404, "invalid_request_error", None),
        (413, "invalid_request_error", "request_too_large"),
        (429, "requests", "rate_limit_exceeded"),
        (500, "server_error", None),
        (502, "server_error", None),
        (504, "server_error", "timeout"),
    ],
)
def test_error_body(status: int, error_type: str, code: str | None) -> None:
    assert fmt.error_body(status, "boom") == {
        "error": {"message": "boom", "type": error_type, "param": None, "code": code}
    }


def test_stream_error() -> None:
    raw = fmt.stream_error("died")
    assert raw.startswith(b"data: ")
    assert raw.endswith(b"\n\n")
    assert orjson.loads(raw[6:])["error"]["message"] == "died"


# --------------------------------------------------------------------------- streaming

BASE = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "gpt-4.1-2025-04-14",
    "system_fingerprint": "fp_1",
}


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return b"data: " + orjson.dumps({**BASE, "choices": choices, **extra}) + b"\n\n"


USAGE = RESPONSE["usage"]
DONE = b"data: [DONE]\n\n"


def _text_events() -> list[bytes]:
    return [
        _chunk({"role": "assistant", "content": "", "refusal": None}, usage=None),
        _chunk({"content": "Hello "}, usage=None),
        _chunk({"content": "there."}, usage=None),
        _chunk({}, "stop", usage=None),
        _chunk(None, usage=USAGE),
        DONE,
    ]


def _tool_events() -> list[bytes]:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    return [
        _chunk(
            {
                "role": "assistant",
                "content": None,
                **call(
                    0, id="call_a", type="function", function={"name": "lookup", "arguments": ""}
                ),
            }
        ),
        _chunk(call(0, function={"arguments": '{"q": '})),
        _chunk(call(0, function={"arguments": '"x"}'})),
        _chunk(call(1, id="call_b", type="function", function={"name": "read", "arguments": ""})),
        _chunk(call(1, function={"arguments": "{}"})),
        _chunk({}, "tool_calls"),
        _chunk(None, usage=USAGE),
        DONE,
    ]


def _feed(observer: fmt.StreamObserver, data: bytes, size: int) -> bytes:
    out = [observer.feed(data[i : i + size]) for i in range(0, len(data), size)]
    return b"".join(out) + observer.flush()


TEXT_STREAM = b"".join(_text_events())
TOOL_STREAM = b"".join(_tool_events())


def test_stream_without_marker_is_identity() -> None:
    observer = fmt.StreamObserver()
    for i in range(0, len(TEXT_STREAM), 5):
        chunk = TEXT_STREAM[i : i + 5]
        assert observer.feed(chunk) is chunk
    assert observer.result() == fmt.parse_response(RESPONSE)


@pytest.mark.parametrize(
    ("stream", "response"), [(TEXT_STREAM, RESPONSE), (TOOL_STREAM, TOOL_RESPONSE)]
)
def test_stream_reply_equals_non_stream_reply(stream: bytes, response: dict[str, Any]) -> None:
    observer = fmt.StreamObserver(MARK)
    out = _feed(observer, stream, len(stream))
    assert out.count(b"vc:conv.abc123") == 1
    reply = observer.result()
    assert reply == fmt.parse_response(response)
    assert reply.usage.cache_read_tokens == 1024


def test_marker_chunk_before_finish_chunk() -> None:
    events = _text_events()
    observer = fmt.StreamObserver(MARK)
    outputs = [observer.feed(event) for event in events]
    for index, (event, output) in enumerate(zip(events, outputs, strict=True)):
        if index != 3:
            assert output is event
    assert outputs[3].endswith(events[3])
    injected = orjson.loads(outputs[3][: -len(events[3])].removeprefix(b"data: "))
    assert injected == {
        **BASE,
        "choices": [
            {"index": 0, "delta": {"content": MARK}, "logprobs": None, "finish_reason": None}
        ],
    }


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100, 10000])
@pytest.mark.parametrize("stream", [TEXT_STREAM, TOOL_STREAM])
def test_split_chunks_give_same_bytes_and_reply(stream: bytes, size: int) -> None:
    whole = fmt.StreamObserver(MARK)
    expected = _feed(whole, stream, len(stream))
    split = fmt.StreamObserver(MARK)
    assert _feed(split, stream, size) == expected
    assert split.result() == whole.result()


def test_marker_before_done_when_no_finish_reason() -> None:
    events = [e for e in _text_events() if b'"stop"' not in e]
    observer = fmt.StreamObserver(MARK)
    out = _feed(observer, b"".join(events), 1)
    assert out.index(b"vc:conv") < out.index(b"[DONE]")
    assert observer.result().complete is True


def test_incomplete_stream() -> None:
    data = b"".join(_text_events()[:3])
    observer = fmt.StreamObserver(MARK)
    tail = b'data: {"id": "chat'
    stream = data + tail
    out = b"".join(observer.feed(stream[i : i + 4]) for i in range(0, len(stream), 4))
    assert out == data  # the unterminated event is held back, no marker
    assert observer.flush() == tail
    reply = observer.result()
    assert reply.complete is False
    assert reply.text == "Hello there."


def test_stream_error_chunk() -> None:
    observer = fmt.StreamObserver(MARK)
    out = _feed(observer, b"".join(_text_events()[:2]) + fmt.stream_error("died"), 3)
    assert b"vc:" not in out
    reply = observer.result()
    assert (reply.error, reply.complete) == ("died", False)


# --------------------------------------------------------------------------- the official SDK


def _sdk_client(payload: bytes) -> Any:
    openai = pytest.importorskip("openai")
    httpx2 = pytest.importorskip("httpx2")

    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="test",
        base_url="http://upstream.test/v1",
        http_client=httpx2.Client(transport=transport),
    )


@pytest.mark.parametrize("stream", [TEXT_STREAM, TOOL_STREAM])
def test_official_sdk_accumulates_injected_marker(stream: bytes) -> None:
    observer = fmt.StreamObserver(MARK)
    client = _sdk_client(_feed(observer, stream, 1))
    with client.chat.completions.stream(
        model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]
    ) as sdk_stream:
        final = sdk_stream.get_final_completion()
    message = final.choices[0].message
    assert message.content is not None
    assert message.content.endswith(MARK)
    assert final.usage is not None
    assert final.usage.prompt_tokens == 1200
    resent = message.model_dump(exclude_none=True, exclude={"parsed", "annotations"})
    if message.tool_calls:
        for call in resent["tool_calls"]:
            call["function"].pop("parsed_arguments", None)
    ex = fmt.parse_request({"messages": [resent]})
    assert ex.marker == "conv.abc123"
    assert "vc:" not in orjson.dumps(ex.turns[0].item).decode()


def test_official_sdk_raw_stream_and_error() -> None:
    openai = pytest.importorskip("openai")
    observer = fmt.StreamObserver(MARK)
    client = _sdk_client(_feed(observer, TEXT_STREAM, 3))
    chunks = list(client.chat.completions.create(model="m", messages=[], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there." + MARK
    client = _sdk_client(b"".join(_text_events()[:2]) + fmt.stream_error("died"))
    with pytest.raises(openai.APIError, match="died"):
        list(client.chat.completions.create(model="m", messages=[], stream=True))


def test_non_sse_body_is_not_held_back() -> None:
    observer = fmt.StreamObserver(MARK)
    body = orjson.dumps(fmt.error_body(429, "slow"))
    assert b"".join(observer.feed(body[i : i + 5]) for i in range(0, len(body), 5)) == body
    assert observer.flush() == b""


def test_mid_conversation_developer_message_moves_to_system_prefix() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "u1"},
            {"role": "developer", "content": "D"},
            {"role": "user", "content": "u2"},
        ]
    }
    ex = fmt.parse_request(body)
    assert ex.system == "S\nD"
    out = fmt.render_request(ex, system_block="M")
    assert [m["content"] for m in out["messages"]] == ["S", "D", "M", "u1", "u2"]
