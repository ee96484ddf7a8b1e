"""Tests of the Gemini adapter (pure: no Django, no network)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from proxy_app.formats import gemini as fmt
from proxy_app.formats.marker import marker_text
from proxy_app.formats.types import FormatError, Usage

MARK = marker_text("conv.abc123")


def _request() -> dict[str, Any]:
    return {
        "systemInstruction": {"parts": [{"text": "Be terse."}, {"text": "Really."}]},
        "generationConfig": {"temperature": 0.5, "thinkingConfig": {"includeThoughts": True}},
        "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "tools": [{"functionDeclarations": [{"name": "weather", "parameters": {}}]}],
        "x-unknown": [1, 2],
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "Weather in Paris and Rome?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                    {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f.pdf"}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "planning", "thought": True},
                    {"text": "Checking.", "thoughtSignature": "sig1"},
                    {"functionCall": {"name": "weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "weather", "response": {"temp": 20}}},
                    {"functionResponse": {"name": "weather", "response": {"temp": 25}}},
                ],
            },
            {"role": "model", "parts": [{"text": "Sunny in both.", "x-part-extra": 1}]},
            {"parts": [{"text": "thanks"}]},
        ],
    }


# --------------------------------------------------------------------------- request


def test_parse_request_turns() -> None:
    exchange = fmt.parse_request(_request(), model="gemini-2.5-pro", stream=True)
    assert exchange.format == "gemini"
    assert exchange.model == "gemini-2.5-pro"
    assert exchange.stream is True
    assert exchange.system == "Be terse.\nReally."
    assert [t.role for t in exchange.turns] == ["user", "assistant", "user", "assistant", "user"]
    user, model, results, answer, last = exchange.turns
    assert user.kinds == ["text", "image", "document"]
    assert user.text == "Weather in Paris and Rome?"
    assert model.kinds == ["thinking", "text", "tool_call", "tool_call"]
    assert model.text == 'Checking.\nweather({"city":"Paris"})\nweather({"city":"Rome"})'
    assert model.tool_call_ids == ["weather#0", "weather#1"]
    assert results.kinds == ["tool_result", "tool_result"]
    assert results.tool_result_ids == ["weather#0", "weather#1"]
    assert results.text == '{"temp":20}\n{"temp":25}'
    assert answer.text == "Sunny in both."
    assert last.text == "thanks"
    assert exchange.tools == _request()["tools"]
    assert fmt.parse_request(_request()).stream is False


def test_call_ids() -> None:
    body = {
        "contents": [
            {"role": "model", "parts": [{"functionCall": {"id": "a1", "name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
            {
                "role": "model",
                "parts": [
                    {"function_call": {"name": "g", "args": {}}},
                    {"functionCall": {"name": "h", "args": {}}},
                    {"functionCall": {"name": "g", "args": {"n": 2}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"function_response": {"name": "g", "response": {}}},
                    {"functionResponse": {"name": "h", "response": {}}},
                    {"functionResponse": {"name": "g", "response": {}}},
                    {"functionResponse": {"name": "z", "response": {}}},
                ],
            },
        ]
    }
    turns = fmt.parse_request(body).turns
    assert [t.tool_call_ids for t in turns] == [["a1"], [], ["g#0", "h#0", "g#1"], []]
    assert [t.tool_result_ids for t in turns] == [[], ["a1"], [], ["g#0", "h#0", "g#1", "z#0"]]


def test_reply_turns_hash_like_resent_turns() -> None:
    """A reply's turn, parsed alone, has the ids it gets when resent in a history."""
    reply = fmt.parse_response(_response(PARTS))
    alone = fmt.parse_request({"contents": reply.items}).turns[0]
    history = _request()["contents"] + reply.items
    resent = fmt.parse_request({"contents": history}).turns[-1]
    assert alone == resent
    assert alone.tool_call_ids == ["weather#0"] == [c["id"] for c in reply.tool_calls]


def test_round_trip_keeps_unknown_fields() -> None:
    body = _request()
    original = copy.deepcopy(body)
    exchange = fmt.parse_request(body, model="gemini-2.5-pro")
    rendered = fmt.render_request(exchange)
    assert rendered == original
    assert rendered is not body
    assert body == original


def test_markers_are_stripped_from_model_parts() -> None:
    body = _request()
    body["contents"][1]["parts"][1]["text"] = "Checking." + marker_text("conv.old")
    body["contents"][3]["parts"][0]["text"] = "Sunny in both." + MARK
    body["contents"].insert(4, {"role": "model", "parts": [{"text": MARK}]})
    body["contents"][1]["parts"].append({"text": MARK, "thoughtSignature": "sig2"})
    original = copy.deepcopy(body)
    exchange = fmt.parse_request(body)
    assert exchange.marker == "conv.abc123"
    assert len(exchange.turns) == 5  # the marker-only content is not a turn
    model = exchange.turns[1].item
    assert model["parts"][1] == {"text": "Checking.", "thoughtSignature": "sig1"}
    assert model["parts"][-1] == {"text": "", "thoughtSignature": "sig2"}
    assert exchange.turns[3].item == _request()["contents"][3]
    assert "vc:" not in orjson.dumps(fmt.render_request(exchange)).decode()
    assert body == original


def test_user_markers_are_kept() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "quote" + MARK}]}]}
    exchange = fmt.parse_request(body)
    assert exchange.marker is None
    assert exchange.turns[0].item is body["contents"][0]


def test_system_block() -> None:
    exchange = fmt.parse_request(_request())
    rendered = fmt.render_request(exchange, system_block="Memory: x")
    assert rendered["systemInstruction"]["parts"] == [
        {"text": "Be terse."},
        {"text": "Really."},
        {"text": "\n\nMemory: x"},
    ]
    assert exchange.body["systemInstruction"] == _request()["systemInstruction"]

    snake = {"system_instruction": {"parts": [{"text": "S"}]}, "contents": []}
    exchange = fmt.parse_request(snake)
    assert exchange.system == "S"
    rendered = fmt.render_request(exchange, system_block="B")
    assert rendered["system_instruction"]["parts"] == [{"text": "S"}, {"text": "\n\nB"}]
    assert "systemInstruction" not in rendered

    bare = fmt.parse_request({"contents": []})
    assert fmt.render_request(bare, system_block="B")["systemInstruction"] == {
        "parts": [{"text": "B"}]
    }


def test_system_block_with_cached_content() -> None:
    body = {
        "cachedContent": "cachedContents/1",
        "contents": [{"role": "user", "parts": [{"text": "q"}]}],
    }
    rendered = fmt.render_request(fmt.parse_request(body), system_block="B")
    assert "systemInstruction" not in rendered
    assert rendered["contents"] == [{"role": "user", "parts": [{"text": "B"}]}, *body["contents"]]


def test_render_with_items() -> None:
    exchange = fmt.parse_request(_request())
    items = [{"role": "user", "parts": [{"text": "new"}]}]
    rendered = fmt.render_request(exchange, items=items)
    assert rendered["contents"] == items
    assert rendered["contents"] is not items
    assert rendered["generationConfig"] == _request()["generationConfig"]


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"contents": {"parts": []}},
        {"contents": ["x"]},
        {"contents": [{"role": "assistant", "parts": []}]},
        {"contents": [{"role": "user", "parts": "x"}]},
        {"contents": [{"role": "user", "parts": ["x"]}]},
        {"contents": [], "systemInstruction": 3},
    ],
)
def test_malformed_requests(body: Any) -> None:
    with pytest.raises(FormatError):
        fmt.parse_request(body)


# --------------------------------------------------------------------------- response


USAGE = {
    "promptTokenCount": 100,
    "cachedContentTokenCount": 40,
    "candidatesTokenCount": 10,
    "thoughtsTokenCount": 5,
    "totalTokenCount": 115,
}
USAGE_OUT = Usage(input_tokens=100, output_tokens=15, cache_read_tokens=40)


def _response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": parts, "role": "model"},
                "finishReason": "STOP",
                "index": 0,
                "safetyRatings": [],
            }
        ],
        "usageMetadata": USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }


PARTS = [
    {"text": "Let me think", "thought": True},
    {"text": "Hello world"},
    {"functionCall": {"name": "weather", "args": {"city": "Paris"}}},
]


def test_parse_response() -> None:
    reply = fmt.parse_response(_response(PARTS))
    assert reply.items == [{"parts": PARTS, "role": "model"}]
    assert reply.text == "Hello world"
    assert reply.usage == USAGE_OUT
    assert reply.model == "gemini-2.5-flash"
    assert reply.stop_reason == "STOP"
    assert reply.tool_calls == [
        {"id": "weather#0", "name": "weather", "arguments": '{"city":"Paris"}'}
    ]
    assert reply.complete is True


def test_parse_response_blocked_and_error() -> None:
    blocked = fmt.parse_response(
        {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": USAGE}
    )
    assert blocked.items == []
    assert blocked.stop_reason == "SAFETY"
    error = fmt.parse_response(
        {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    )
    assert error.error == "slow down"
    with pytest.raises(FormatError):
        fmt.parse_response("x")


def test_add_marker() -> None:
    body = _response(PARTS)
    marked = fmt.add_marker(body, MARK)
    assert marked["candidates"][0]["content"]["parts"][1] == {"text": "Hello world" + MARK}
    assert body["candidates"][0]["content"]["parts"] == PARTS
    assert fmt.parse_response(marked).items == fmt.parse_response(body).items
    exchange = fmt.parse_request({"contents": [marked["candidates"][0]["content"]]})
    assert exchange.marker == "conv.abc123"
    assert exchange.turns[0].item == body["candidates"][0]["content"]

    calls_only = _response(PARTS[2:])
    marked = fmt.add_marker(calls_only, MARK)
    assert marked["candidates"][0]["content"]["parts"][-1] == {"text": MARK}
    assert fmt.parse_response(marked).items == fmt.parse_response(calls_only).items


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (502, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ],
)
def test_error_body(status: int, name: str) -> None:
    assert fmt.error_body(status, "nope") == {
        "error": {"code": status, "message": "nope", "status": name}
    }


# --------------------------------------------------------------------------- streaming


def _chunk(parts: list[dict[str, Any]], *, finish: bool = False) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    chunk: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    if finish:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = USAGE
    else:
        chunk["usageMetadata"] = {"promptTokenCount": 100, "totalTokenCount": 100}
    return chunk


def _sse(chunks: list[dict[str, Any]], newline: bytes = b"\r\n") -> list[bytes]:
    return [b"data: " + orjson.dumps(c) + newline * 2 for c in chunks]


def _observe(
    data: bytes, size: int | None, marker: str | None = MARK
) -> tuple[bytes, fmt.StreamObserver]:
    observer = fmt.StreamObserver(marker)
    step = size or len(data)
    out = b"".join(observer.feed(data[i : i + step]) for i in range(0, len(data), step))
    return out + observer.flush(), observer


TEXT_END = [
    _chunk([{"text": "Let me think", "thought": True}]),
    _chunk([{"text": "Hello"}]),
    _chunk([{"text": " world"}], finish=True),
]
SIGNATURE_END = [
    _chunk([{"text": "Hello"}]),
    _chunk([{"text": " world"}]),
    _chunk([{"text": "", "thoughtSignature": "sig"}], finish=True),
]


def test_marker_goes_after_a_terminal_chunk_with_text() -> None:
    events = _sse(TEXT_END)
    out, observer = _observe(b"".join(events), None)
    assert observer.injected is True
    assert out.startswith(b"".join(events))
    extra = orjson.loads(out[len(b"".join(events)) :].removeprefix(b"data: "))
    assert extra == {
        "candidates": [
            {
                "content": {"parts": [{"text": MARK}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    assert out.endswith(b"\r\n\r\n")


def test_marker_goes_before_a_terminal_chunk_without_text() -> None:
    events = _sse(SIGNATURE_END, newline=b"\n")
    out, _ = _observe(b"".join(events), None)
    marker_event = b"data: " + orjson.dumps(
        {
            "candidates": [{"content": {"parts": [{"text": MARK}], "role": "model"}, "index": 0}],
            "modelVersion": "gemini-2.5-flash",
            "responseId": "r1",
        }
    )
    assert out == events[0] + events[1] + marker_event + b"\n\n" + events[2]


@pytest.mark.parametrize("chunks", [TEXT_END, SIGNATURE_END])
def test_chunking_does_not_change_output_or_reply(chunks: list[dict[str, Any]]) -> None:
    data = b"".join(_sse(chunks))
    whole, first = _observe(data, None)
    for size in (1, 2, 7, 50):
        out, observer = _observe(data, size)
        assert out == whole
        assert observer.result() == first.result()


def test_stream_reply_equals_non_stream_reply() -> None:
    reply = _observe(b"".join(_sse(TEXT_END)), 3)[1].result()
    expected = fmt.parse_response(
        _response([{"text": "Let me think", "thought": True}, {"text": "Hello world"}])
    )
    assert reply == expected
    assert reply.usage == USAGE_OUT
    assert reply.complete is True

    reply = _observe(b"".join(_sse(SIGNATURE_END)), 1)[1].result()
    expected = fmt.parse_response(_response([{"text": "Hello world", "thoughtSignature": "sig"}]))
    assert reply == expected


def test_stream_with_function_call() -> None:
    chunks = [
        _chunk([{"text": "Checking."}]),
        _chunk(
            [
                {
                    "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                    "thoughtSignature": "s",
                }
            ],
            finish=True,
        ),
    ]
    out, observer = _observe(b"".join(_sse(chunks)), 4)
    reply = observer.result()
    assert reply.items == [
        {
            "role": "model",
            "parts": [{"text": "Checking."}, chunks[1]["candidates"][0]["content"]["parts"][0]],
        }
    ]
    assert reply.tool_calls == [
        {"id": "weather#0", "name": "weather", "arguments": '{"city":"Paris"}'}
    ]
    assert out.index(b"vc:conv") < out.index(b"functionCall")  # before: no text in the last chunk


def test_feed_returns_the_same_object_without_marker() -> None:
    observer = fmt.StreamObserver()
    events = _sse(TEXT_END)
    for event in events:
        half = event[:10]
        assert observer.feed(half) is half
        rest = event[10:]
        assert observer.feed(rest) is rest
    assert observer.injected is False
    assert observer.result().text == "Hello world"


def test_feed_returns_the_same_object_for_whole_events() -> None:
    observer = fmt.StreamObserver(MARK)
    first = _sse(TEXT_END)[0]
    assert observer.feed(first) is first


def test_incomplete_stream() -> None:
    events = _sse(TEXT_END[:2])
    data = b"".join(events) + b'data: {"candidates": [{"content": {"parts": [{"te'
    out, observer = _observe(data, 5)
    assert out == data  # nothing injected, the unfinished event comes out of flush()
    reply = observer.result()
    assert reply.complete is False
    assert reply.text == "Hello"
    assert reply.stop_reason == ""


def test_continuation_chunk_is_not_terminal() -> None:
    chunk = _chunk([{"text": "part"}], finish=True)
    chunk["candidates"][0]["finishReason"] = "CONTINUATION"
    out, observer = _observe(b"".join(_sse([chunk])), None)
    assert observer.injected is False
    assert observer.result().complete is False


def test_error_event_in_stream() -> None:
    data = _sse(TEXT_END[:1])[0] + fmt.stream_error("upstream died")
    out, observer = _observe(data, 3)
    assert out == data
    assert observer.result().error == "upstream died"


def test_json_array_stream_is_passed_through() -> None:
    data = b"[" + b",\r\n".join(orjson.dumps(c) for c in TEXT_END) + b"]"
    whole, observer = _observe(b"\n" + data, None)
    assert whole == b"\n" + data
    assert observer.injected is False
    bytewise, slow = _observe(b"\n" + data, 1)
    assert bytewise == whole
    reply = observer.result()
    assert reply == slow.result()
    assert reply.text == "Hello world"
    assert reply.usage == USAGE_OUT
    assert reply.complete is True
    cut = _observe(data[: data.rindex(b"{")], 9)[1].result()
    assert cut.text == "Hello"
    assert cut.complete is False


# --------------------------------------------------------------------------- official SDK


def _client(
    body: bytes, *, status: int = 200, content_type: str = "text/event-stream"
) -> genai.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    options = genai_types.HttpOptions(base_url="http://x", httpx_client=http)
    return genai.Client(api_key="k", http_options=options)


@pytest.mark.parametrize("chunks", [TEXT_END, SIGNATURE_END])
def test_sdk_reads_observed_stream(chunks: list[dict[str, Any]]) -> None:
    client = _client(_observe(b"".join(_sse(chunks)), 3)[0])
    received = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    text = "".join(c.text or "" for c in received)
    assert text == "Hello world" + MARK
    assert received[-1].usage_metadata is not None
    assert received[-1].usage_metadata.total_token_count == 115
    assert received[-1].candidates is not None
    assert received[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP


@pytest.mark.parametrize("chunks", [TEXT_END, SIGNATURE_END])
def test_sdk_chat_history_keeps_the_marker_and_hashes_like_the_stored_reply(
    chunks: list[dict[str, Any]],
) -> None:
    out, observer = _observe(b"".join(_sse(chunks)), None)
    chat = _client(out).chats.create(model="gemini-2.5-flash")
    list(chat.send_message_stream("hi"))
    # google-genai keeps one model content per streamed chunk, the marker's too.
    history = [c.model_dump(mode="json", exclude_none=True) for c in chat.get_history()]
    assert len(history) == 1 + len(chunks) + 1
    exchange = fmt.parse_request({"contents": history})
    assert exchange.marker == "conv.abc123"
    assert "vc:" not in orjson.dumps([t.item for t in exchange.turns]).decode()
    # One model turn, identified as the stored reply's, so a resend adds nothing.
    [stored] = fmt.parse_request({"contents": observer.result().items}).turns
    assert [t.role for t in exchange.turns] == ["user", "assistant"]
    assert _identity(exchange.turns[1]) == _identity(stored)
    # Upstream still gets the chat's own contents, only the marker's left out.
    rendered = fmt.render_request(exchange)["contents"]
    marker_only = {"parts": [{"text": MARK}], "role": "model"}
    assert rendered == [c for c in history if c != marker_only]
    assert len(rendered) == len(history) - 1


def _identity(turn: Any) -> tuple[Any, ...]:
    """What a stored turn's hash is made of (``proxy_app.sessions.turn_hash``)."""
    return (turn.role, turn.text, turn.kinds, turn.tool_call_ids, turn.tool_result_ids)


def test_consecutive_model_contents_are_one_turn_with_call_ids_of_one_content() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"text": "Check"}]},
        {"role": "model", "parts": [{"text": "ing."}, {"functionCall": {"name": "w", "args": {}}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"n": 2}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}]},
    ]
    exchange = fmt.parse_request({"contents": contents})
    assert [t.role for t in exchange.turns] == ["user", "assistant", "user"]
    model = exchange.turns[1]
    assert model.item == {
        "role": "model",
        "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "w", "args": {}}},
            {"functionCall": {"name": "w", "args": {"n": 2}}},
        ],
    }
    assert model.tool_call_ids == ["w#0", "w#1"]
    assert exchange.turns[2].tool_result_ids == ["w#0"]
    alone = fmt.parse_request({"contents": [model.item]}).turns[0]
    assert alone == model
    assert fmt.render_request(exchange)["contents"] == contents


def test_sdk_raises_on_stream_error() -> None:
    data = _sse(TEXT_END[:1])[0] + fmt.stream_error("upstream died")
    client = _client(_observe(data, 2)[0])
    with pytest.raises(genai_errors.APIError, match="upstream died"):
        list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))


def test_sdk_reads_marked_response_and_error_body() -> None:
    marked = fmt.add_marker(_response(PARTS[1:2]), MARK)
    client = _client(orjson.dumps(marked), content_type="application/json")
    response = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert response.text == "Hello world" + MARK

    failing = _client(
        orjson.dumps(fmt.error_body(404, "no such model")),
        status=404,
        content_type="application/json",
    )
    with pytest.raises(genai_errors.ClientError) as info:
        failing.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert info.value.code == 404
    assert info.value.status == "NOT_FOUND"
