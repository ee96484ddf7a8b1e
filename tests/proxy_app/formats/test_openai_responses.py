"""Tests of the OpenAI Responses adapter (pure: no Django, no network)."""

from __future__ import annotations

import copy
from typing import Any

import httpx2
import openai
import orjson
import pytest

from proxy_app.formats import openai_responses as fmt
from proxy_app.formats.marker import marker_text
from proxy_app.formats.types import FormatError, Usage

MARK = marker_text("conv.abc123")


def _request() -> dict[str, Any]:
    return {
        "model": "gpt-5",
        "instructions": "Be terse.",
        "stream": True,
        "store": False,
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "read", "parameters": {}, "x-extra": 1}],
        "x-unknown": {"a": [1, 2]},
        "input": [
            {"type": "message", "role": "developer", "content": "Use tools."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look at this"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,iVBO",
                        "detail": "high",
                    },
                    {"type": "input_file", "file_id": "file-1"},
                ],
                "x-item-extra": True,
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "thinking about it"}],
                "encrypted_content": "opaque",
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "read",
                "arguments": '{"p":"a"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [
                    {"type": "input_text", "text": "file body"},
                    {"type": "input_image", "image_url": "data:image/png;base64,x"},
                ],
            },
            {"role": "user", "content": "thanks"},
        ],
    }


# --------------------------------------------------------------------------- request


def test_parse_request_turns() -> None:
    exchange = fmt.parse_request(_request())
    assert exchange.format == "openai_responses"
    assert exchange.model == "gpt-5"
    assert exchange.stream is True
    assert exchange.system == "Be terse.\n\nUse tools."
    assert [t.role for t in exchange.turns] == [
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    user, reasoning, message, call, result, last = exchange.turns
    assert user.kinds == ["text", "image", "document"]
    assert user.text == "Look at this"
    assert reasoning.kinds == ["thinking"]
    assert reasoning.text == "thinking about it"
    assert message.text == "Reading it."
    assert call.kinds == ["tool_call"]
    assert call.tool_call_ids == ["call_1"]
    assert call.text == 'read({"p":"a"})'
    assert result.kinds == ["tool_result", "image"]
    assert result.tool_result_ids == ["call_1"]
    assert result.text == "file body"
    assert last.text == "thanks"
    assert exchange.tools == [{"type": "function", "name": "read", "parameters": {}, "x-extra": 1}]
    assert exchange.marker is None


def test_round_trip_keeps_unknown_fields_and_order() -> None:
    body = _request()
    original = copy.deepcopy(body)
    exchange = fmt.parse_request(body)
    rendered = fmt.render_request(exchange)
    assert rendered == original
    assert rendered is not body
    assert body == original


def test_string_input_is_one_user_turn() -> None:
    body = {"model": "gpt-5", "input": "hello", "temperature": 0.2}
    exchange = fmt.parse_request(body)
    assert [(t.role, t.text, t.item) for t in exchange.turns] == [
        ("user", "hello", {"role": "user", "content": "hello"})
    ]
    assert fmt.render_request(exchange) == body
    items = [*[t.item for t in exchange.turns], {"role": "user", "content": "more"}]
    rendered = fmt.render_request(exchange, items=items)
    assert rendered["input"] == items
    assert rendered["temperature"] == 0.2
    assert body["input"] == "hello"


def test_markers_are_stripped_from_assistant_items() -> None:
    body = _request()
    body["input"][3]["content"][0]["text"] = "Reading it." + marker_text("conv.old")
    body["input"].insert(
        4,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": MARK, "annotations": []}],
        },
    )
    body["input"].append({"role": "assistant", "content": "Done." + marker_text("conv.new")})
    original = copy.deepcopy(body)
    exchange = fmt.parse_request(body)
    assert exchange.marker == "conv.new"
    assistant = [t for t in exchange.turns if t.role == "assistant"]
    assert assistant[1].item["content"][0]["text"] == "Reading it."
    assert assistant[-1].item == {"role": "assistant", "content": "Done."}
    # The marker-only message (added by add_marker to a tool-call reply) is not a turn.
    assert len(exchange.turns) == 7
    assert all("vc:" not in orjson.dumps(t.item).decode() for t in exchange.turns)
    rendered = fmt.render_request(exchange)
    assert "vc:" not in orjson.dumps(rendered).decode()
    assert len(rendered["input"]) == len(original["input"]) - 1
    assert body == original


def test_user_text_markers_are_kept() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "quote " + MARK}]}
    exchange = fmt.parse_request(body)
    assert exchange.marker is None
    assert exchange.turns[0].item == body["input"][0]


def test_system_block_goes_into_instructions() -> None:
    exchange = fmt.parse_request(_request())
    rendered = fmt.render_request(exchange, system_block="Memory: x")
    assert rendered["instructions"] == "Be terse.\n\nMemory: x"
    assert rendered["input"][0] == {"type": "message", "role": "developer", "content": "Use tools."}
    assert exchange.body["instructions"] == "Be terse."

    bare = fmt.parse_request({"model": "m", "input": "hi"})
    assert fmt.render_request(bare, system_block="Memory: x")["instructions"] == "Memory: x"


def test_system_items_keep_their_place() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "system", "content": "first"},
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "developer", "content": "mid"},
            {"role": "user", "content": "u2"},
        ],
    }
    exchange = fmt.parse_request(body)
    assert [t.text for t in exchange.turns] == ["u1", "a1", "u2"]
    assert fmt.render_request(exchange)["input"] == body["input"]
    # A rewritten history: leading system items stay first, later ones keep their
    # distance from the end.
    items = [{"role": "user", "content": f"x{i}"} for i in range(4)]
    rendered = fmt.render_request(exchange, items=items)["input"]
    assert [i["content"] for i in rendered] == ["first", "x0", "x1", "x2", "mid", "x3"]
    short = fmt.render_request(exchange, items=items[:1])["input"]
    assert [i["content"] for i in short] == ["first", "mid", "x0"]


def test_tool_items_and_roles() -> None:
    body = {
        "model": "m",
        "input": [
            {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "diff"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "mcp_approval_request", "id": "mcpr_1", "name": "x", "arguments": "{}"},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
            {"type": "item_reference", "id": "msg_9"},
        ],
    }
    turns = fmt.parse_request(body).turns
    assert [t.role for t in turns] == [
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "tool",
        "assistant",
    ]
    assert turns[0].tool_call_ids == ["c2"]
    assert turns[0].text == "patch(diff)"
    assert turns[1].tool_result_ids == ["c2"]
    assert turns[1].text == "ok"
    assert turns[2].tool_call_ids == []
    assert turns[3].tool_call_ids == ["mcpr_1"]
    assert turns[4].tool_result_ids == ["mcpr_1"]
    assert turns[5].kinds == ["other"]


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"model": "m", "input": 3},
        {"model": "m", "input": ["x"]},
        {"model": "m", "input": [{"role": "robot", "content": "x"}]},
        {"model": 5, "input": "x"},
        {"model": "m", "input": "x", "instructions": ["x"]},
    ],
)
def test_malformed_requests(body: Any) -> None:
    with pytest.raises(FormatError):
        fmt.parse_request(body)


# --------------------------------------------------------------------------- response


def _response(status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": "gpt-5-2025-08-07",
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "plan"}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "read",
                "arguments": '{"p":"a"}',
                "status": "completed",
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 60},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 12},
            "total_tokens": 120,
        },
    }


def test_parse_response() -> None:
    body = _response()
    reply = fmt.parse_response(body)
    assert reply.items == body["output"]
    assert reply.text == "Hello"
    assert reply.usage == Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60)
    assert reply.model == "gpt-5-2025-08-07"
    assert reply.stop_reason == "completed"
    assert reply.tool_calls == [{"id": "call_1", "name": "read", "arguments": '{"p":"a"}'}]
    assert reply.complete is True


def test_parse_response_incomplete_and_error() -> None:
    body = _response("incomplete")
    body["incomplete_details"] = {"reason": "max_output_tokens"}
    assert fmt.parse_response(body).stop_reason == "max_output_tokens"
    failed = fmt.parse_response({"error": {"message": "boom", "type": "server_error"}})
    assert failed.error == "boom"
    with pytest.raises(FormatError):
        fmt.parse_response([1])


def test_add_marker_appends_to_last_output_text() -> None:
    body = _response()
    marked = fmt.add_marker(body, MARK)
    assert marked["output"][1]["content"][0]["text"] == "Hello" + MARK
    assert body["output"][1]["content"][0]["text"] == "Hello"
    assert fmt.parse_response(marked).items == fmt.parse_response(body).items
    # Resent as history, the marker identifies the conversation.
    exchange = fmt.parse_request({"model": "m", "input": marked["output"]})
    assert exchange.marker == "conv.abc123"
    assert [t.item for t in exchange.turns] == body["output"]


def test_add_marker_without_message_adds_an_item() -> None:
    body = _response()
    body["output"] = body["output"][2:]
    marked = fmt.add_marker(body, MARK)
    assert len(marked["output"]) == 2
    assert marked["output"][-1]["content"][0]["text"] == MARK
    assert fmt.parse_response(marked).items == body["output"]
    exchange = fmt.parse_request({"model": "m", "input": marked["output"]})
    assert exchange.marker == "conv.abc123"
    assert [t.item for t in exchange.turns] == body["output"]


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, "invalid_request_error", None),
        (401, "invalid_request_error", "invalid_api_key"),
        (429, "requests", "rate_limit_exceeded"),
        (500, "server_error", "server_error"),
        (504, "server_error", "timeout"),
    ],
)
def test_error_body(status: int, kind: str, code: str | None) -> None:
    assert fmt.error_body(status, "nope") == {
        "error": {"message": "nope", "type": kind, "param": None, "code": code}
    }


# --------------------------------------------------------------------------- streaming


def _sse(payload: dict[str, Any]) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _stream_events(final: dict[str, Any]) -> list[dict[str, Any]]:
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    reasoning, message, call = final["output"]
    empty_message = {**message, "status": "in_progress", "content": []}
    empty_call = {**call, "status": "in_progress", "arguments": ""}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**reasoning, "summary": []},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.added", "output_index": 1, "item": empty_message},
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": part,
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Hel",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "lo",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "text": "Hello",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {**part, "text": "Hello"},
        },
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        {"type": "response.output_item.added", "output_index": 2, "item": empty_call},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 2,
            "delta": '{"p":',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 2,
            "delta": '"a"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 2,
            "arguments": '{"p":"a"}',
        },
        {"type": "response.output_item.done", "output_index": 2, "item": call},
        {"type": "response.completed", "response": final},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _stream_bytes(final: dict[str, Any] | None = None) -> bytes:
    return b"".join(_sse(e) for e in _stream_events(final or _response()))


def _observe(
    data: bytes, size: int | None, marker: str | None = None
) -> tuple[bytes, fmt.StreamObserver]:
    observer = fmt.StreamObserver(marker)
    step = size or len(data)
    out = b"".join(observer.feed(data[i : i + step]) for i in range(0, len(data), step))
    return out + observer.flush(), observer


def _text_ending_events() -> list[dict[str, Any]]:
    """A stream whose output ends with the message's text (no tool call after it)."""
    final = _response()
    final["output"] = final["output"][:2]
    events = [e for e in _stream_events(_response()) if e.get("output_index") != 2]
    events[-1] = {**events[-1], "response": final}
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _events_of(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]


def test_observer_without_marker_passes_the_stream_through_and_builds_the_reply() -> None:
    data = _stream_bytes()
    whole, observer = _observe(data, None)
    bytewise, slow = _observe(data, 1)
    assert whole == bytewise == data
    assert observer.injected is False
    reply = observer.result()
    assert reply == slow.result()
    assert reply.items == fmt.parse_response(_response()).items
    assert reply.text == "Hello"
    assert reply.usage == Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60)
    assert reply.tool_calls == [{"id": "call_1", "name": "read", "arguments": '{"p":"a"}'}]
    assert reply.complete is True


def test_observer_returns_the_same_chunk_object_without_marker() -> None:
    observer = fmt.StreamObserver()
    chunk = _stream_bytes()
    assert observer.feed(chunk) is chunk


@pytest.mark.parametrize("size", [None, 1, 7, 64])
def test_marker_is_a_last_text_delta_and_ends_every_closing_event(size: int | None) -> None:
    data = b"".join(_sse(e) for e in _text_ending_events())
    out, observer = _observe(data, size, MARK)
    assert observer.injected is True
    assert out == _observe(data, None, MARK)[0]
    events = _events_of(out)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    at = kinds.index("response.output_text.done")
    assert kinds[at - 1] == "response.output_text.delta"
    assert events[at - 1]["delta"] == MARK
    assert events[at - 1]["item_id"] == "msg_1"
    assert events[at]["text"] == "Hello" + MARK
    assert events[at + 1]["part"]["text"] == "Hello" + MARK
    assert events[at + 2]["item"]["content"][0]["text"] == "Hello" + MARK
    assert events[-1]["response"]["output"][1]["content"][0]["text"] == "Hello" + MARK
    assert len(events) == len(_text_ending_events()) + 1
    # Everything before the inserted delta goes out byte for byte.
    prefix = b"".join(_sse(e) for e in _text_ending_events()[: at - 1])
    assert out.startswith(prefix)
    reply = observer.result()
    assert reply.text == "Hello"
    assert reply.complete is True


def test_marker_after_a_tool_call_is_a_message_of_its_own() -> None:
    data = _stream_bytes()
    out, observer = _observe(data, 5, MARK)
    assert observer.injected is True
    events = _events_of(out)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    original = _stream_events(_response())
    assert events[: len(original) - 1] == original[:-1]
    added = events[len(original) - 1 : -1]
    assert [e["type"] for e in added] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert {e["output_index"] for e in added} == {3}
    assert added[2]["delta"] == MARK
    output = events[-1]["response"]["output"]
    assert output[:3] == _response()["output"]
    assert output[3]["content"][0]["text"] == MARK
    assert observer.result().items == fmt.parse_response(_response()).items


def test_marker_keeps_a_stream_without_event_lines_without_them() -> None:
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in _text_ending_events())
    out, observer = _observe(data, 3, MARK)
    assert observer.injected is True
    assert b"event:" not in out
    assert _events_of(out)[-1]["response"]["output"][1]["content"][0]["text"] == "Hello" + MARK


def test_stream_cut_before_its_end_goes_out_unchanged_and_unmarked() -> None:
    events = _text_ending_events()[:-1]  # no response.completed
    data = b"".join(_sse(e) for e in events)
    out, observer = _observe(data, 4, MARK)
    assert out == data
    assert observer.injected is False
    assert observer.result().complete is False


def test_failed_response_gets_no_marker() -> None:
    events = _text_ending_events()
    failed = {**events[-1], "type": "response.failed"}
    failed["response"] = {**failed["response"], "status": "failed", "error": {"message": "x"}}
    data = b"".join(_sse(e) for e in [*events[:-1], failed])
    out, observer = _observe(data, 9, MARK)
    assert out == data
    assert observer.injected is False


def test_observer_strips_markers_from_the_reply() -> None:
    final = fmt.add_marker(_response(), MARK)
    reply = _observe(_stream_bytes(final), 7)[1].result()
    assert reply.items == fmt.parse_response(_response()).items


def test_incomplete_stream_rebuilds_partial_items() -> None:
    events = _stream_events(_response())
    data = b"".join(_sse(e) for e in events[:8]) + b"event: response.output_te"
    reply = _observe(data, 3)[1].result()
    assert reply.complete is False
    assert reply.items[0]["type"] == "reasoning"
    assert reply.items[1]["content"] == [
        {"type": "output_text", "text": "Hello", "annotations": []}
    ]
    assert reply.text == "Hello"


def test_failed_and_error_events() -> None:
    events = _stream_events(_response())[:3]
    failed = {
        **_response("failed"),
        "output": [],
        "error": {"code": "server_error", "message": "boom"},
    }
    data = b"".join(_sse(e) for e in events) + _sse(
        {"type": "response.failed", "response": failed, "sequence_number": 3}
    )
    reply = _observe(data, None)[1].result()
    assert reply.error == "boom"
    assert reply.complete is False
    assert _observe(fmt.stream_error("bad"), 2)[1].result().error == "bad"


# --------------------------------------------------------------------------- official SDK


def _client(
    body: bytes, *, status: int = 200, content_type: str = "text/event-stream"
) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": content_type})

    transport = httpx2.MockTransport(handler)
    return openai.OpenAI(
        api_key="k",
        base_url="http://x/v1",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def _through_observer(data: bytes) -> bytes:
    return _observe(data, 5, MARK)[0]


def test_sdk_stream_accumulator_reads_observed_stream() -> None:
    client = _client(_through_observer(_stream_bytes()))
    with client.responses.stream(model="gpt-5", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello" + MARK
    assert final.output_text == "Hello" + MARK
    types = [item.type for item in final.output]
    assert types == ["reasoning", "message", "function_call", "message"]


def test_sdk_stream_accumulator_ends_the_text_with_the_marker() -> None:
    data = b"".join(_sse(e) for e in _text_ending_events())
    client = _client(_through_observer(data))
    with client.responses.stream(model="gpt-5", input="hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Hel", "lo", MARK]
    assert [e.text for e in events if e.type == "response.output_text.done"] == ["Hello" + MARK]
    assert final.output_text == "Hello" + MARK
    assert [item.type for item in final.output] == ["reasoning", "message"]
    # Resent as history, the output carries the marker and parses back to the reply.
    resent = [item.model_dump(exclude_none=True) for item in final.output]
    exchange = fmt.parse_request({"input": resent})
    assert exchange.marker == "conv.abc123"
    assert exchange.turns[1].text == "Hello"


def test_sdk_create_stream_yields_every_event() -> None:
    client = _client(_through_observer(_stream_bytes()))
    events = list(client.responses.create(model="gpt-5", input="hi", stream=True))
    assert [e.sequence_number for e in events] == list(range(23))
    assert events[-1].type == "response.completed"


def test_sdk_raises_on_stream_error() -> None:
    data = b"".join(_sse(e) for e in _stream_events(_response())[:2]) + fmt.stream_error(
        "upstream died"
    )
    client = _client(_through_observer(data))
    with pytest.raises(openai.APIError, match="upstream died"):
        list(client.responses.create(model="gpt-5", input="hi", stream=True))


def test_sdk_reads_marked_response_and_error_body() -> None:
    marked = fmt.add_marker(_response(), MARK)
    client = _client(orjson.dumps(marked), content_type="application/json")
    response = client.responses.create(model="gpt-5", input="hi")
    assert response.output_text == "Hello" + MARK

    failing = _client(
        orjson.dumps(fmt.error_body(401, "bad key")), status=401, content_type="application/json"
    )
    with pytest.raises(openai.AuthenticationError) as info:
        failing.responses.create(model="gpt-5", input="hi")
    assert info.value.code == "invalid_api_key"
