"""Tests of the Anthropic Messages adapter (pure: no Django, no network)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy_app.formats import anthropic as fmt
from proxy_app.formats.marker import marker_text
from proxy_app.formats.types import FormatError, Usage

MARK = marker_text("conv.abc123")


def _request() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": True,
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "system": [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Big context", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": "read", "input_schema": {"type": "object"}, "x-extra": 1}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "Look at this",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
                        "citations": {"enabled": True},
                    },
                ],
                "x-message-extra": [1, 2],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Reading it." + MARK},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [
                            {"type": "text", "text": "file body"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "x",
                                },
                            },
                        ],
                        "is_error": False,
                    }
                ],
            },
            {"role": "assistant", "content": "Done." + MARK.replace("abc123", "def456")},
            {"role": "user", "content": "thanks"},
        ],
    }


# --------------------------------------------------------------------------- request


def test_parse_request_turns() -> None:
    body = _request()
    ex = fmt.parse_request(body)
    assert ex.format == "anthropic"
    assert ex.model == "claude-sonnet-4-5"
    assert ex.stream is True
    assert ex.system == "You are terse.\nBig context"
    assert ex.tools == body["tools"]
    assert ex.marker == "conv.def456"
    assert [t.role for t in ex.turns] == ["user", "assistant", "user", "assistant", "user"]
    first, call, result, done, last = ex.turns
    assert first.kinds == ["text", "image", "document"]
    assert first.text == "Look at this"
    assert call.kinds == ["thinking", "thinking", "text", "tool_call"]
    assert call.text == 'Reading it.\nread({"p":"a"})'
    assert call.tool_call_ids == ["toolu_1"]
    assert result.tool_result_ids == ["toolu_1"]
    assert result.kinds == ["tool_result", "image"]
    assert result.text == "file body"
    assert done.text == "Done."
    assert done.item["content"] == "Done."
    assert last.kinds == ["text"]


def test_parse_request_url_overrides_and_defaults() -> None:
    ex = fmt.parse_request({"messages": []}, model="m", stream=True)
    assert (ex.model, ex.stream, ex.system, ex.turns, ex.tools) == ("m", True, "", [], [])
    ex = fmt.parse_request({"model": "x", "messages": [], "system": "sys"})
    assert (ex.model, ex.stream, ex.system) == ("x", False, "sys")


def test_parse_does_not_mutate_body() -> None:
    body = _request()
    before = copy.deepcopy(body)
    ex = fmt.parse_request(body)
    fmt.render_request(ex, system_block="memory")
    assert body == before
    assert ex.body is body


def test_round_trip_keeps_unknown_fields() -> None:
    body = _request()
    for message in body["messages"]:
        if message["role"] == "assistant":
            content = message["content"]
            if isinstance(content, str):
                message["content"] = content.split("\n\n<!--")[0]
            else:
                content[2]["text"] = "Reading it."
    ex = fmt.parse_request(body)
    assert ex.marker is None
    out = fmt.render_request(ex)
    assert out is not body
    assert orjson.dumps(out) == orjson.dumps(body)


def test_marker_stripped_and_empty_block_dropped() -> None:
    body = _request()
    body["messages"][1]["content"].append({"type": "text", "text": MARK})
    ex = fmt.parse_request(body)
    content = ex.turns[1].item["content"]
    assert [b["type"] for b in content] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert content[2] == {"type": "text", "text": "Reading it."}
    assert ex.marker == "conv.def456"
    # the original message is untouched
    assert body["messages"][1]["content"][2]["text"].endswith(MARK)
    out = fmt.render_request(ex)
    assert "vc:" not in orjson.dumps(out["messages"]).decode()


def test_marker_only_block_kept_when_alone() -> None:
    body = {"messages": [{"role": "assistant", "content": [{"type": "text", "text": MARK}]}]}
    ex = fmt.parse_request(body)
    assert ex.turns[0].item["content"] == [{"type": "text", "text": ""}]
    assert ex.marker == "conv.abc123"


def test_markers_in_user_text_are_left_alone() -> None:
    body = {"messages": [{"role": "user", "content": "quote " + MARK}]}
    ex = fmt.parse_request(body)
    assert ex.marker is None
    assert ex.turns[0].item is body["messages"][0]


def test_system_block_appended_after_cache_controlled_blocks() -> None:
    body = _request()
    out = fmt.render_request(fmt.parse_request(body), system_block="MEMORY")
    assert out["system"] == [*body["system"], {"type": "text", "text": "MEMORY"}]
    assert out["system"][1]["cache_control"] == {"type": "ephemeral"}


CACHE_MARK = {"cache_control": {"type": "ephemeral"}}


def test_system_block_with_string_or_missing_system_is_marked_for_the_cache() -> None:
    ex = fmt.parse_request({"messages": [], "system": "be nice"})
    assert fmt.render_request(ex)["system"] == "be nice"
    assert fmt.render_request(ex, system_block="M")["system"] == [
        {"type": "text", "text": "be nice"},
        {"type": "text", "text": "M", **CACHE_MARK},  # no client mark: ours ends the stable prefix
    ]
    ex = fmt.parse_request({"messages": []})
    assert "system" not in fmt.render_request(ex)
    assert fmt.render_request(ex, system_block="M")["system"] == [
        {"type": "text", "text": "M", **CACHE_MARK}
    ]


def test_a_client_mark_anywhere_means_no_mark_of_ours() -> None:
    for body in (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "q", **CACHE_MARK}]}]},
        {"messages": [], "tools": [{"name": "t", "input_schema": {}, **CACHE_MARK}]},
        {"messages": [], "system": [{"type": "text", "text": "s", **CACHE_MARK}]},
    ):
        out = fmt.render_request(fmt.parse_request(body), system_block="M")
        assert out["system"][-1] == {"type": "text", "text": "M"}
        assert fmt._cache_marks(out) == 1  # the client's, where the client put it


def test_marks_in_dropped_turns_do_not_count() -> None:
    marked = {"role": "user", "content": [{"type": "text", "text": "old", **CACHE_MARK}]}
    ex = fmt.parse_request({"messages": [marked, {"role": "assistant", "content": "a"}]})
    kept = [{"role": "user", "content": "new"}]
    out = fmt.render_request(ex, items=kept, system_block="M")
    assert out["system"] == [{"type": "text", "text": "M", **CACHE_MARK}]
    # the client's mark went with the dropped turn: ours end the memory block and
    # the latest message
    latest = {"role": "user", "content": [{"type": "text", "text": "new", **CACHE_MARK}]}
    assert out["messages"] == [latest]
    assert fmt._cache_marks(out) == 2


def test_render_with_items() -> None:
    ex = fmt.parse_request(_request())
    items = [{"role": "user", "content": "only this"}]
    out = fmt.render_request(ex, items=items)
    assert out["messages"] == items
    assert out["messages"] is not items
    assert out["metadata"] == {"user_id": "u-1"}


@pytest.mark.parametrize(
    "body",
    [
        [],
        "x",
        {},
        {"messages": {}},
        {"messages": ["hi"]},
        {"messages": [{"role": "system", "content": "x"}]},
        {"messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": 3}]},
        {"messages": [{"role": "user", "content": ["text"]}]},
        {"messages": [], "system": 5},
        {"messages": [], "model": 5},
    ],
)
def test_malformed_requests(body: Any) -> None:
    with pytest.raises(FormatError):
        fmt.parse_request(body)


def test_permissive_unknown_blocks() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "search_result", "foo": 1}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
                    {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
                ],
            },
        ]
    }
    ex = fmt.parse_request(body)
    assert ex.turns[0].kinds == ["other"]
    assert ex.turns[1].kinds == ["tool_call", "tool_result"]
    assert ex.turns[1].tool_call_ids == ["srv_1"]
    assert ex.turns[1].tool_result_ids == ["srv_1"]


# --------------------------------------------------------------------------- response


RESPONSE: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBsig"},
        {"type": "text", "text": "Hello there."},
        {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "/a", "n": [1, 2]}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "output_tokens": 40,
        "service_tier": "standard",
    },
}


def test_parse_response() -> None:
    reply = fmt.parse_response(RESPONSE)
    assert reply.items == [{"role": "assistant", "content": RESPONSE["content"]}]
    assert reply.text == "Hello there."
    assert reply.model == "claude-sonnet-4-5-20250929"
    assert reply.stop_reason == "tool_use"
    assert reply.complete is True
    assert reply.usage == Usage(
        input_tokens=1112, output_tokens=40, cache_read_tokens=1000, cache_write_tokens=100
    )
    assert reply.tool_calls == [
        {"id": "toolu_9", "name": "read", "arguments": '{"path":"/a","n":[1,2]}'}
    ]


def test_parse_error_response() -> None:
    reply = fmt.parse_response(fmt.error_body(529, "Overloaded"))
    assert reply.error == "Overloaded"
    assert reply.complete is False
    with pytest.raises(FormatError):
        fmt.parse_response([1])


def test_add_marker_appends_to_last_text_block() -> None:
    before = copy.deepcopy(RESPONSE)
    out = fmt.add_marker(RESPONSE, MARK)
    assert before == RESPONSE
    assert out["content"][1] == {"type": "text", "text": "Hello there." + MARK}
    assert out["content"][2] is RESPONSE["content"][2]
    # a client resending this reply gets the original blocks back upstream
    ex = fmt.parse_request({"messages": [{"role": "assistant", "content": out["content"]}]})
    assert ex.turns[0].item["content"] == RESPONSE["content"]
    assert ex.marker == "conv.abc123"


def test_add_marker_without_text_block() -> None:
    body = {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
    out = fmt.add_marker(body, MARK)
    assert out["content"][-1] == {"type": "text", "text": MARK}
    assert len(body["content"]) == 1
    ex = fmt.parse_request({"messages": [{"role": "assistant", "content": out["content"]}]})
    assert ex.turns[0].item["content"] == body["content"]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_body(status: int, error_type: str) -> None:
    assert fmt.error_body(status, "boom") == {
        "type": "error",
        "error": {"type": error_type, "message": "boom"},
    }


def test_stream_error() -> None:
    raw = fmt.stream_error("upstream died")
    assert raw.startswith(b"event: error\ndata: ")
    assert raw.endswith(b"\n\n")
    assert orjson.loads(raw.split(b"data: ", 1)[1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "upstream died"},
    }


# --------------------------------------------------------------------------- streaming


def _event(payload: dict[str, Any]) -> bytes:
    return (
        b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
    )


def _stream_events() -> list[bytes]:
    start_message = {k: v for k, v in RESPONSE.items() if k not in ("content", "usage")}
    start_message.update(
        content=[],
        stop_reason=None,
        usage={
            "input_tokens": 12,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": 1,
        },
    )
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    tool = {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {}}
    return [
        _event({"type": "message_start", "message": start_message}),
        _event({"type": "content_block_start", "index": 0, "content_block": thinking}),
        _event({"type": "ping"}),
        _delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
        _delta(0, {"type": "thinking_delta", "thinking": "think."}),
        _delta(0, {"type": "signature_delta", "signature": "EqQBsig"}),
        _event({"type": "content_block_stop", "index": 0}),
        _event(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        _delta(1, {"type": "text_delta", "text": "Hello "}),
        _delta(1, {"type": "text_delta", "text": "there."}),
        _event({"type": "content_block_stop", "index": 1}),
        _event({"type": "content_block_start", "index": 2, "content_block": tool}),
        _delta(2, {"type": "input_json_delta", "partial_json": ""}),
        _delta(2, {"type": "input_json_delta", "partial_json": '{"path": "/a",'}),
        _delta(2, {"type": "input_json_delta", "partial_json": ' "n": [1, 2]}'}),
        _event({"type": "content_block_stop", "index": 2}),
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 40},
            }
        ),
        _event({"type": "message_stop"}),
    ]


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event({"type": "content_block_delta", "index": index, "delta": delta})


def _feed(observer: fmt.StreamObserver, data: bytes, size: int) -> bytes:
    out = [observer.feed(data[i : i + size]) for i in range(0, len(data), size)]
    return b"".join(out) + observer.flush()


STREAM = b"".join(_stream_events())


def test_stream_without_marker_passes_chunks_through_identically() -> None:
    observer = fmt.StreamObserver()
    for i in range(0, len(STREAM), 7):
        chunk = STREAM[i : i + 7]
        assert observer.feed(chunk) is chunk
    reply = observer.result()
    assert reply.complete is True
    assert reply.items == fmt.parse_response(RESPONSE).items


def test_stream_reply_equals_non_stream_reply() -> None:
    observer = fmt.StreamObserver(MARK)
    _feed(observer, STREAM, len(STREAM))
    stream_reply = observer.result()
    assert stream_reply == fmt.parse_response(RESPONSE)
    assert stream_reply.usage.input_tokens == 1112
    assert stream_reply.usage.output_tokens == 40
    assert "vc:" not in orjson.dumps(stream_reply.items).decode()


def test_marker_injected_before_message_delta() -> None:
    observer = fmt.StreamObserver(MARK)
    events = _stream_events()
    outputs = [observer.feed(event) for event in events]
    for event, output in zip(events[:-2] + events[-1:], outputs[:-2] + outputs[-1:], strict=True):
        assert output is event
    injected = outputs[-2]
    assert injected.endswith(events[-2])
    added = injected[: -len(events[-2])]
    assert added == (
        _event(
            {
                "type": "content_block_start",
                "index": 3,
                "content_block": {"type": "text", "text": ""},
            }
        )
        + _delta(3, {"type": "text_delta", "text": MARK})
        + _event({"type": "content_block_stop", "index": 3})
    )


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, 1000])
def test_split_chunks_give_same_bytes_and_reply(size: int) -> None:
    whole = fmt.StreamObserver(MARK)
    expected = _feed(whole, STREAM, len(STREAM))
    split = fmt.StreamObserver(MARK)
    assert _feed(split, STREAM, size) == expected
    assert split.result() == whole.result()
    assert expected.count(b"vc:conv.abc123") == 1


def test_crlf_stream() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    whole = fmt.StreamObserver(MARK)
    expected = _feed(whole, crlf, len(crlf))
    one = fmt.StreamObserver(MARK)
    assert _feed(one, crlf, 1) == expected
    assert one.result() == fmt.parse_response(RESPONSE)
    assert expected.count(b"vc:conv.abc123") == 1


def test_incomplete_stream() -> None:
    events = _stream_events()
    observer = fmt.StreamObserver(MARK)
    data = b"".join(events[:9]) + events[9][:20]
    out = _feed(observer, data, 4)
    assert b"vc:" not in out
    reply = observer.result()
    assert reply.complete is False
    assert reply.text == "Hello "
    assert reply.usage.input_tokens == 1112


def test_stream_error_event() -> None:
    events = _stream_events()
    observer = fmt.StreamObserver(MARK)
    out = _feed(observer, b"".join(events[:5]) + fmt.stream_error("overloaded"), 3)
    assert b"vc:" not in out
    reply = observer.result()
    assert reply.error == "overloaded"
    assert reply.complete is False


def test_stream_without_message_delta_injects_before_message_stop() -> None:
    events = [e for e in _stream_events() if b"message_delta" not in e]
    observer = fmt.StreamObserver(MARK)
    out = _feed(observer, b"".join(events), 1)
    assert out.index(b"vc:conv") < out.index(b"event: message_stop")
    assert observer.result().complete is True


def test_message_delta_usage_overrides_start_usage() -> None:
    events = _stream_events()
    events[-2] = _event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 7, "input_tokens": 20, "cache_read_input_tokens": None},
        }
    )
    observer = fmt.StreamObserver()
    _feed(observer, b"".join(events), 10)
    assert observer.result().usage == Usage(
        input_tokens=1120, output_tokens=7, cache_read_tokens=1000, cache_write_tokens=100
    )


# --------------------------------------------------------------------------- the official SDK


def _sdk_client(payload: bytes) -> Any:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")

    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    transport = httpx2.MockTransport(handler)
    return anthropic.Anthropic(
        api_key="test",
        base_url="http://upstream.test",
        http_client=httpx2.Client(transport=transport),
    )


def test_official_sdk_accumulates_injected_marker() -> None:
    observer = fmt.StreamObserver(MARK)
    payload = _feed(observer, STREAM, 1)
    client = _sdk_client(payload)
    with client.messages.stream(
        model="test-model", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "text"]
    assert final.content[-1].text == MARK
    assert final.content[2].input == {"path": "/a", "n": [1, 2]}
    assert final.stop_reason == "tool_use"
    # what the client sends back next time is the original reply again
    resent = [b.model_dump(exclude_none=True) for b in final.content]
    ex = fmt.parse_request({"messages": [{"role": "assistant", "content": resent}]})
    assert ex.marker == "conv.abc123"
    assert [b["type"] for b in ex.turns[0].item["content"]] == ["thinking", "text", "tool_use"]


def test_official_sdk_raises_on_stream_error() -> None:
    anthropic = pytest.importorskip("anthropic")
    events = _stream_events()
    client = _sdk_client(b"".join(events[:5]) + fmt.stream_error("upstream died"))
    with (
        pytest.raises(anthropic.APIStatusError, match="upstream died"),
        client.messages.stream(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        stream.get_final_message()


def test_non_sse_body_is_not_held_back() -> None:
    observer = fmt.StreamObserver(MARK)
    body = orjson.dumps(fmt.error_body(429, "slow"))
    assert b"".join(observer.feed(body[i : i + 5]) for i in range(0, len(body), 5)) == body
    assert observer.flush() == b""


def test_the_latest_message_is_marked_before_its_recalled_block() -> None:
    ex = fmt.parse_request({"messages": []})
    recalled = {"type": "text", "text": "<recalled-context>r</recalled-context>"}
    items = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": [{"type": "text", "text": "a1"}]},
        {"role": "user", "content": [{"type": "text", "text": "latest"}, recalled]},
    ]
    out = fmt.render_request(ex, items=items, system_block="M", recall_blocks=1)
    marked = {"type": "text", "text": "latest", **CACHE_MARK}
    assert out["messages"][2]["content"] == [marked, recalled]
    # strings become one text block, so the next request repeats them byte for byte
    assert out["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "q1"}]}
    assert out["messages"][1] == items[1]
    assert fmt._cache_marks(out) == 2
    assert items[0]["content"] == "q1"  # inputs untouched
    assert "cache_control" not in items[2]["content"][0]
    # Without recall the mark ends the message; a message of only thinking gets none.
    plain = [*items[:2], {"role": "user", "content": "q2"}]
    out = fmt.render_request(ex, items=plain, system_block="M")
    assert out["messages"][2]["content"] == [{"type": "text", "text": "q2", **CACHE_MARK}]
    thinking = {"role": "user", "content": [{"type": "thinking", "thinking": "hm"}, recalled]}
    out = fmt.render_request(ex, items=[thinking], system_block="M", recall_blocks=1)
    assert out["messages"] == [thinking]
    assert fmt._cache_marks(out) == 1


def test_the_next_request_repeats_the_marked_prefix_byte_for_byte() -> None:
    """Request k+1 carries the mark one message further on; its JSON still
    starts with request k's up to the text that request k marked."""
    ex = fmt.parse_request({"messages": []})
    recalled = {"type": "text", "text": "<recalled-context>r</recalled-context>"}
    first = fmt.render_request(
        ex,
        items=[{"role": "user", "content": [{"type": "text", "text": "q1"}, recalled]}],
        system_block="M",
        recall_blocks=1,
    )
    second = fmt.render_request(
        ex,
        items=[
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": [{"type": "text", "text": "q2"}, recalled]},
        ],
        system_block="M",
        recall_blocks=1,
    )
    a, b = (orjson.dumps([body["system"], body["messages"]]).decode() for body in (first, second))
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert a[:shared].endswith('"text":"q1"')
