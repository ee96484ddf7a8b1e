"""Errors, faults and secrets through the real proxy process.

The official SDKs (and raw httpx where an SDK cannot send what we need) talk to
the vcloud server process; the fake provider plays the upstream. Each test
checks what the client saw (status, the SDK's own exception type, a
provider-shaped body), what reached the fake, and what the proxy stored.

"Nothing was stored" is checked with a sentinel: a later good request by the
same key, whose request-log row can only appear after the writer has handled
everything submitted before it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client as DjangoClient
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from memory_app.models import Turn
from telemetry_app.models import LLMCall, RequestLog
from tests.fakes.provider import FakeProvider
from tests.proxy_app.conftest import (
    ANTHROPIC_SECRET,
    GEMINI_SECRET,
    OPENAI_SECRET,
    ProxyKey,
    wait_for,
)
from tests.support.server import Server, free_port
from vcloud.accounts.models import Account, VCKey
from vcloud.accounts.services import account_for_user, vckey_create, vckey_revoke

pytestmark = [
    pytest.mark.usefixtures("orm"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-4o"
GEM = "gemini-2.5-flash"
MARKER = "<!-- vc:"

# ------------------------------------------------------------------------ helpers


_users = itertools.count()


def new_key(server: Server, **upstreams: str) -> ProxyKey:
    """Another account with its own key (``upstream_<provider>=URL`` overrides)."""
    user = get_user_model().objects.create_user(f"e2e-err-{time.time_ns()}-{next(_users)}")
    account = account_for_user(user)
    if upstreams:
        for provider, url in upstreams.items():
            setattr(account, f"upstream_{provider}", url)
        account.save()
    _, raw = vckey_create(account=account, name="e2e")
    return ProxyKey(account, raw, server)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


class ScriptedUpstream(ThreadingHTTPServer):
    """An upstream that answers every request with ``reply`` (status, content type,
    body bytes), for provider behaviour the fake has no knob for."""

    reply: tuple[int, str, bytes] = (200, "application/json", b"{}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptedUpstream

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        status, content_type, body = self.server.reply
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _ClosingHandler(_ScriptedHandler):
    """Keeps the connection open after its first answer, then drops it on the
    next request without answering: an idle keep-alive that timed out on the
    server just as the proxy reused it from its pool."""

    served = 0

    def do_POST(self) -> None:
        if self.served:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.close_connection = True
            return
        self.served += 1
        super().do_POST()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream(("127.0.0.1", 0), _ScriptedHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(timeout=5)


def logs_of(account: Account, count: int = 1) -> list[RequestLog]:
    """The account's request-log rows, oldest first, once ``count`` are stored."""

    def stored() -> list[RequestLog] | None:
        rows = list(RequestLog.objects.filter(account=account))
        return rows if len(rows) >= count else None

    rows = wait_for(stored, timeout=30)  # generous: the writer shares the machine
    assert rows, f"expected {count} request-log rows, the writer stored fewer"
    return sorted(rows, key=lambda r: (r.created_at, r.pk))


def turns_in(conversation_id: int | None) -> list[tuple[int, str, str]]:
    """(position, role, text) of the conversation's active turns."""
    return list(
        Turn.objects.filter(conversation_id=conversation_id, replaced=False)
        .order_by("position")
        .values_list("position", "role", "text")
    )


def roles_in(conversation_id: int | None) -> list[str]:
    return [role for _, role, _ in turns_in(conversation_id)]


def assert_no_ledger_cost(request_id: str) -> None:
    for call in LLMCall.objects.filter(request_id=request_id):
        assert (call.input_tokens, call.output_tokens, call.cost) == (0, 0, 0)


def claude_for(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=ANTHROPIC_SECRET, base_url=base, max_retries=0)


def gpt_for(base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=OPENAI_SECRET, base_url=base + "/v1", max_retries=0)


def gemini_for(base: str) -> genai.Client:
    return genai.Client(api_key=GEMINI_SECRET, http_options=types.HttpOptions(base_url=base))


def ask(sdk: str, base: str, text: str = "hello", **extra: Any) -> Any:
    """One non-streaming call through ``sdk`` ("anthropic", "openai", "gemini")."""
    if sdk == "anthropic":
        return claude_for(base).messages.create(
            model=CLAUDE, max_tokens=20, messages=[{"role": "user", "content": text}], **extra
        )
    if sdk == "openai":
        return gpt_for(base).chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": text}], **extra
        )
    config = types.GenerateContentConfig(
        http_options=types.HttpOptions(headers=extra.get("extra_headers", {}))
    )
    client = gemini_for(base)  # held: a collected client closes its connection pool
    return client.models.generate_content(model=GEM, contents=text, config=config)


# Raw requests per wire format: (path below the key prefix, headers, body).
RAW_HEADERS = {
    "anthropic": {"x-api-key": ANTHROPIC_SECRET, "anthropic-version": "2023-06-01"},
    "openai_chat": {"authorization": f"Bearer {OPENAI_SECRET}"},
    "openai_responses": {"authorization": f"Bearer {OPENAI_SECRET}"},
    "gemini": {"x-goog-api-key": GEMINI_SECRET},
}
RAW_PATHS = {
    "anthropic": "/v1/messages",
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
    "gemini": f"/v1beta/models/{GEM}:generateContent",
}
FORMATS = list(RAW_PATHS)


def raw_body(fmt: str, history: list[Any]) -> dict[str, Any]:
    if fmt == "anthropic":
        return {"model": CLAUDE, "max_tokens": 20, "messages": history}
    if fmt == "openai_chat":
        return {"model": GPT, "messages": history}
    if fmt == "openai_responses":
        return {"model": GPT, "input": history}
    return {"contents": history}


def user_item(fmt: str, text: str) -> dict[str, Any]:
    if fmt == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": "user", "content": text}


def reply_items(fmt: str, reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant's answer as the client sends it back in the next request."""
    if fmt == "anthropic":
        return [{"role": "assistant", "content": reply["content"]}]
    if fmt == "openai_chat":
        return [reply["choices"][0]["message"]]
    if fmt == "openai_responses":
        return list(reply["output"])
    return [reply["candidates"][0]["content"]]


def reply_text(fmt: str, reply: dict[str, Any]) -> str:
    if fmt == "anthropic":
        return "".join(b["text"] for b in reply["content"] if b["type"] == "text")
    if fmt == "openai_chat":
        return str(reply["choices"][0]["message"]["content"])
    if fmt == "openai_responses":
        return "".join(c["text"] for item in reply["output"] for c in item.get("content", []))
    return "".join(p.get("text", "") for p in reply["candidates"][0]["content"]["parts"])


def assert_error_shape(fmt: str, status: int, body: Any) -> str:
    """``body`` is the provider's error JSON for ``status``; returns its message."""
    if fmt == "anthropic":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
        return str(body["error"]["message"])
    if fmt == "gemini":
        assert body["error"]["code"] == status
        assert body["error"]["status"]
        return str(body["error"]["message"])
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return str(body["error"]["message"])


# ------------------------------------------------------------ 1. bad or no vckey


AUTH_ERRORS: dict[str, type[Exception]] = {
    "anthropic": anthropic.AuthenticationError,
    "openai": openai.AuthenticationError,
    "gemini": genai_errors.ClientError,
}


@pytest.mark.parametrize("sdk", ["anthropic", "openai", "gemini"])
@pytest.mark.parametrize("problem", ["wrong", "revoked", "missing"])
def test_bad_or_missing_vckey_raises_the_sdks_authentication_error_and_forwards_nothing(
    proxy_key: ProxyKey, fake: FakeProvider, sdk: str, problem: str
) -> None:
    server = proxy_key.server
    if problem == "wrong":
        base = f"{server.url}/v/{proxy_key.raw[:-4]}xxxx"
    elif problem == "revoked":
        vckey_revoke(key=VCKey.objects.get(account=proxy_key.account))
        base = proxy_key.base
    else:
        base = server.url  # no /v/<key> prefix, no X-VC-Key header, no ?vckey=

    with pytest.raises(AUTH_ERRORS[sdk]) as caught:
        ask(sdk, base)

    exc: Any = caught.value
    if sdk == "anthropic":
        assert exc.status_code == 401
        assert exc.body["error"]["type"] == "authentication_error"
        assert "vckey" in assert_error_shape("anthropic", 401, exc.body)
    elif sdk == "openai":
        assert exc.status_code == 401
        assert (exc.type, exc.code) == ("invalid_request_error", "invalid_api_key")
        assert "vckey" in exc.body["message"]
    else:
        assert (exc.code, exc.status) == (401, "UNAUTHENTICATED")
        assert "vckey" in assert_error_shape("gemini", 401, exc.details)
    assert fake.requests == []
    if problem == "revoked":
        # Nothing was recorded for the refused call: a fresh key's call is the only row.
        _, fresh = vckey_create(account=proxy_key.account, name="fresh")
        ask(sdk, f"{server.url}/v/{fresh}")
        [row] = logs_of(proxy_key.account)
        assert row.vckey.revoked_at is None


# ------------------------------------------------------------- 2. malformed JSON


@pytest.mark.parametrize("fmt", FORMATS)
def test_malformed_body_gets_a_provider_400_and_leaves_the_conversation_intact(
    proxy_key: ProxyKey, fake: FakeProvider, fmt: str
) -> None:
    url = proxy_key.base + RAW_PATHS[fmt]
    headers = {**RAW_HEADERS[fmt], "x-vc-session": f"malformed-{fmt}"}
    history = [user_item(fmt, "first question")]
    with httpx.Client(timeout=10) as http:
        first = http.post(url, headers=headers, json=raw_body(fmt, history))
        assert first.status_code == 200
        [log] = logs_of(proxy_key.account)
        stored = turns_in(log.conversation_id)
        assert roles_in(log.conversation_id) == ["user", "assistant"]

        for bad in (b'{"model": "x", "messages": [', b"[1, 2, 3]", b""):
            refused = http.post(
                url, headers={**headers, "content-type": "application/json"}, content=bad
            )
            assert refused.status_code == 400, bad
            body = refused.json()
            assert_error_shape(fmt, 400, body)
            if fmt == "gemini":
                assert body["error"]["status"] == "INVALID_ARGUMENT"
            else:
                assert body["error"]["type"] == "invalid_request_error"

        history += [*reply_items(fmt, first.json()), user_item(fmt, "second question")]
        second = http.post(url, headers=headers, json=raw_body(fmt, history))
        assert second.status_code == 200

    assert len(fake.requests) == 2  # the malformed bodies never left the proxy
    _, second_log = logs_of(proxy_key.account, 2)
    assert RequestLog.objects.filter(account=proxy_key.account).count() == 2
    assert second_log.conversation_id == log.conversation_id
    after = turns_in(log.conversation_id)
    assert after[:2] == stored
    assert [(p, r) for p, r, _ in after[2:]] == [(2, "user"), (3, "assistant")]
    assert after[2][2] == "second question"


# ---------------------------------------------------------------- 3. unknown path


def test_unknown_paths_under_the_key_get_a_404_in_the_clients_format(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    with pytest.raises(openai.NotFoundError) as chat:
        gpt_for(proxy_key.base).embeddings.create(model="text-embedding-3-small", input="x")
    assert chat.value.status_code == 404
    assert chat.value.type == "invalid_request_error"
    assert "/v1/embeddings" in chat.value.body["message"]

    with pytest.raises(anthropic.NotFoundError) as claude:
        claude_for(proxy_key.base).messages.batches.list()
    assert claude.value.body["error"]["type"] == "not_found_error"

    client = gemini_for(proxy_key.base)
    with pytest.raises(genai_errors.ClientError) as gem:
        list(client.files.list())
    assert (gem.value.code, gem.value.status) == (404, "NOT_FOUND")

    with httpx.Client(timeout=10) as http:
        raw = http.post(f"{proxy_key.base}/v2/anything", json={})
    assert raw.status_code == 404
    assert_error_shape("openai_chat", 404, raw.json())
    assert "/v2/anything" in raw.text
    assert proxy_key.raw not in raw.text  # error bodies end up in client logs
    assert fake.requests == []


# ------------------------------------------------------- 4. upstream errors mirrored

UPSTREAM_ERRORS: dict[tuple[str, int], type[Exception]] = {
    ("anthropic", 400): anthropic.BadRequestError,
    ("anthropic", 429): anthropic.RateLimitError,
    ("anthropic", 500): anthropic.InternalServerError,
    ("openai", 400): openai.BadRequestError,
    ("openai", 429): openai.RateLimitError,
    ("openai", 500): openai.InternalServerError,
    ("gemini", 400): genai_errors.ClientError,
    ("gemini", 429): genai_errors.ClientError,
    ("gemini", 500): genai_errors.ServerError,
}


def provider_error(sdk: str, status: int, message: str) -> dict[str, Any]:
    if sdk == "anthropic":
        kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if sdk == "openai":
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": "upstream_x"}}
    state = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED"}.get(status, "INTERNAL")
    return {"error": {"code": status, "message": message, "status": state}}


@pytest.mark.parametrize("status", [400, 429, 500])
@pytest.mark.parametrize("sdk", ["anthropic", "openai", "gemini"])
def test_upstream_error_reaches_the_sdk_as_the_providers_own_and_is_logged_without_cost(
    proxy_key: ProxyKey, fake: FakeProvider, sdk: str, status: int
) -> None:
    message = f"upstream says no ({sdk} {status})"
    body = provider_error(sdk, status, message)
    fake.fail_next(status, body)

    with pytest.raises(UPSTREAM_ERRORS[(sdk, status)]) as caught:
        ask(sdk, proxy_key.base, "will fail")

    exc: Any = caught.value
    if sdk == "anthropic":
        assert exc.status_code == status
        assert exc.body == body
        assert exc.request_id == "req_fake00000001"  # the provider's headers came through
    elif sdk == "openai":
        assert exc.status_code == status
        assert exc.body == body["error"]
        assert exc.message == f"Error code: {status} - {message}"
    else:
        assert (exc.code, exc.message, exc.details) == (status, message, body)
    assert len(fake.requests) == 1
    [log] = logs_of(proxy_key.account)
    assert log.status == status
    assert log.conversation_id is not None
    assert (log.upstream_tokens, log.output_tokens, log.cost) == (0, 0, 0)
    assert_no_ledger_cost(log.request_id)
    assert roles_in(log.conversation_id) == ["user"]


def test_upstream_error_before_a_stream_starts_is_mirrored_to_the_streaming_client(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    fake.fail_next(529)
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        claude.messages.stream(
            model=CLAUDE, max_tokens=20, messages=[{"role": "user", "content": "stream?"}]
        ) as stream,
    ):
        list(stream.text_stream)
    assert caught.value.status_code == 529
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Fake failure 529."},
    }
    [log] = logs_of(proxy_key.account)
    assert (log.status, log.stream) == (529, True)
    assert_no_ledger_cost(log.request_id)


# ------------------------------------------------------------ 5. upstream unreachable


def test_unreachable_upstream_gives_a_provider_shaped_502_and_is_logged(
    proxy_server: Server, fake: FakeProvider
) -> None:
    dead = closed_port_url()
    key = new_key(proxy_server, anthropic=dead, openai=dead, gemini=dead)

    with pytest.raises(anthropic.InternalServerError) as claude:
        ask("anthropic", key.base)
    assert claude.value.status_code == 502
    assert claude.value.body["error"]["type"] == "api_error"
    assert "could not be reached" in claude.value.body["error"]["message"]

    with pytest.raises(openai.InternalServerError) as gpt:
        gpt_for(key.base).chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    assert gpt.value.status_code == 502
    assert gpt.value.type == "server_error"

    with pytest.raises(genai_errors.ServerError) as gem:
        ask("gemini", key.base)
    assert (gem.value.code, gem.value.status) == (502, "UNAVAILABLE")

    assert fake.requests == []
    logs = logs_of(key.account, 3)
    assert [log.status for log in logs] == [502, 502, 502]
    assert all(log.error.startswith("upstream unreachable") for log in logs)
    for log in logs:
        assert_no_ledger_cost(log.request_id)


# ------------------------------------------------------------ 6. broken stream


def _stream_anthropic(key: ProxyKey, headers: dict[str, str], pieces: list[str]) -> None:
    with claude_for(key.base).messages.stream(
        model=CLAUDE,
        max_tokens=50,
        messages=[{"role": "user", "content": "one two three four five"}],
        extra_headers=headers,
    ) as stream:
        for text in stream.text_stream:
            pieces.append(text)


def _stream_chat(key: ProxyKey, headers: dict[str, str], pieces: list[str]) -> None:
    for chunk in gpt_for(key.base).chat.completions.create(
        model=GPT,
        messages=[{"role": "user", "content": "one two three four five"}],
        stream=True,
        extra_headers=headers,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)


def _stream_responses(key: ProxyKey, headers: dict[str, str], pieces: list[str]) -> None:
    for event in gpt_for(key.base).responses.create(
        model=GPT, input="one two three four five", stream=True, extra_headers=headers
    ):
        if event.type == "response.output_text.delta":
            pieces.append(event.delta)


def _stream_gemini(key: ProxyKey, headers: dict[str, str], pieces: list[str]) -> None:
    config = types.GenerateContentConfig(http_options=types.HttpOptions(headers=headers))
    client = gemini_for(key.base)
    for chunk in client.models.generate_content_stream(
        model=GEM, contents="one two three four five", config=config
    ):
        pieces.append(chunk.text or "")


Streamer = Callable[[ProxyKey, dict[str, str], list[str]], None]
STREAMS: dict[str, tuple[Streamer, type[Exception]]] = {
    "anthropic": (_stream_anthropic, anthropic.APIError),
    "openai_chat": (_stream_chat, openai.APIError),
    "openai_responses": (_stream_responses, openai.APIError),
    "gemini": (_stream_gemini, genai_errors.APIError),
}


@pytest.mark.parametrize("fmt", list(STREAMS))
def test_stream_broken_mid_way_raises_in_the_sdk_is_logged_and_the_proxy_keeps_serving(
    proxy_key: ProxyKey, fake: FakeProvider, fmt: str
) -> None:
    run, error = STREAMS[fmt]
    seen: list[str] = []
    with pytest.raises(error) as caught:
        run(proxy_key, {"x-fake-break-after": "2"}, seen)

    assert "upstream stream broke" in str(caught.value)
    assert seen[:2] == ["Echo: ", "one "]  # what came before the break reached the client
    [log] = logs_of(proxy_key.account)
    assert (log.status, log.stream) == (200, True)
    assert "upstream stream broke" in log.error
    # The client never got a whole answer to keep: no half turn in the conversation.
    assert roles_in(log.conversation_id) == ["user"]

    again: list[str] = []
    run(proxy_key, {}, again)
    assert "".join(again).startswith("Echo: one two three four five")
    logs = logs_of(proxy_key.account, 2)
    assert (logs[1].status, logs[1].error) == (200, "")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def test_providers_own_error_event_mid_stream_reaches_the_sdk_and_the_log_keeps_its_message(
    proxy_server: Server, fake: FakeProvider, scripted: ScriptedUpstream
) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": CLAUDE}
    message |= {
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 5, "output_tokens": 0},
    }
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    scripted.reply = (
        200,
        "text/event-stream",
        _sse("message_start", {"type": "message_start", "message": message})
        + _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        + _sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hal"},
            },
        )
        + _sse("error", overloaded),
    )
    key = new_key(proxy_server, anthropic=scripted.url)
    pieces: list[str] = []

    with pytest.raises(anthropic.APIStatusError) as caught:
        _stream_anthropic(key, {}, pieces)

    assert pieces == ["Hal"]
    assert caught.value.body == overloaded  # the provider's own event, not one of ours
    [log] = logs_of(key.account)
    assert (log.status, log.stream) == (200, True)
    assert "Overloaded" in log.error
    assert roles_in(log.conversation_id) == ["user"]


def test_success_status_with_an_unreadable_body_is_relayed_as_it_came_and_logged(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    fake.fail_next(200, b"<html>upstream gateway page</html>")
    with httpx.Client(timeout=10) as http:
        reply = http.post(
            proxy_key.base + RAW_PATHS["anthropic"],
            headers=RAW_HEADERS["anthropic"],
            json=raw_body("anthropic", [user_item("anthropic", "hello?")]),
        )

    assert (reply.status_code, reply.content) == (200, b"<html>upstream gateway page</html>")
    [log] = logs_of(proxy_key.account)
    assert log.status == 200
    assert "unreadable upstream response" in log.error
    assert roles_in(log.conversation_id) == ["user"]


# ------------------------------------------------------- 7. client disconnects


@pytest.mark.parametrize("fmt", ["anthropic", "gemini"])
def test_client_leaving_mid_stream_closes_the_upstream_stream_and_is_logged(
    proxy_key: ProxyKey, fake: FakeProvider, fmt: str
) -> None:
    words = " ".join(f"w{i}" for i in range(60))
    headers = {**RAW_HEADERS[fmt], "x-fake-delay": "0.05", "x-fake-reply": words}
    if fmt == "gemini":
        url = f"{proxy_key.base}/v1beta/models/{GEM}:streamGenerateContent?alt=sse"
        body = raw_body(fmt, [user_item(fmt, "talk")])
    else:
        url = proxy_key.base + RAW_PATHS[fmt]
        body = {**raw_body(fmt, [user_item(fmt, "talk")]), "stream": True}

    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", url, headers=headers, json=body) as response,
    ):
        assert response.status_code == 200
        first = next(response.iter_raw())
        assert first

    assert wait_for(lambda: fake.client_disconnects == 1, timeout=30)
    [log] = logs_of(proxy_key.account)
    assert log.stream is True
    assert "client disconnected" in log.error
    assert roles_in(log.conversation_id) == ["user"]


# ---------------------------------------------------------- 8. fault injection


@pytest.mark.parametrize("fmt", FORMATS)
def test_injected_processing_fault_forwards_the_clients_bytes_unmodified(
    proxy_key: ProxyKey, fake: FakeProvider, fmt: str
) -> None:
    url = proxy_key.base + RAW_PATHS[fmt]
    history = [user_item(fmt, "first fault question")]
    with httpx.Client(timeout=10) as http:
        first = http.post(url, headers=RAW_HEADERS[fmt], json=raw_body(fmt, history))
        assert first.status_code == 200
        assert MARKER in reply_text(fmt, first.json())  # the proxy planted its marker

        # The client sends the reply back, marker and all, in its own formatting:
        # normal processing would strip the marker, the fallback must not.
        history += [*reply_items(fmt, first.json()), user_item(fmt, "second fault question")]
        sent = json.dumps(raw_body(fmt, history), indent=1, sort_keys=True).encode()
        headers = {**RAW_HEADERS[fmt], "content-type": "application/json", "x-vc-fault": "process"}
        reply = http.post(url, headers=headers, content=sent)

    assert reply.status_code == 200
    received = fake.requests[-1]
    assert received.body == sent
    assert received.json == json.loads(sent)
    assert MARKER in received.body.decode()
    assert not any(name.startswith("x-vc-") for name in received.headers)
    assert "Echo: second fault question" in reply_text(fmt, reply.json())
    assert MARKER not in reply.text  # no marker added on the fallback path either
    first_log, faulted = logs_of(proxy_key.account, 2)
    assert faulted.status == 200
    assert faulted.error.startswith("forwarded unmodified: InjectedFault")
    assert faulted.upstream_tokens == len(sent) // 4  # the provider's usage is still recorded
    assert first_log.error == ""


def test_injected_fault_on_a_stream_relays_the_upstream_stream_untouched(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    sent = b'{"model":"claude-sonnet-4-5","max_tokens":20,"stream":true,' + (
        b'"messages":[{"role":"user","content":"fault stream"}]}'
    )
    headers = {**RAW_HEADERS["anthropic"], "x-vc-fault": "process"}
    with httpx.Client(timeout=10) as http:
        reply = http.post(proxy_key.base + "/v1/messages", headers=headers, content=sent)

    assert reply.status_code == 200
    assert fake.requests[-1].body == sent
    assert "event: message_stop" in reply.text
    assert MARKER not in reply.text
    [log] = logs_of(proxy_key.account)
    assert log.stream is True
    assert log.error.startswith("forwarded unmodified: InjectedFault")


# ------------------------------------------------------------------- 9. secrets


def _texts_of_every_row() -> list[tuple[str, str]]:
    """(model label, serialised text/JSON columns) of every row of every model."""
    kinds = (models.CharField, models.TextField, models.JSONField, models.BinaryField)
    out: list[tuple[str, str]] = []
    for model in apps.get_models(include_auto_created=True):
        names = [f.attname for f in model._meta.concrete_fields if isinstance(f, kinds)]
        if not names:
            continue
        for row in model._default_manager.values_list(*names):
            text = orjson.dumps(
                [
                    bytes(v).decode("latin-1") if isinstance(v, memoryview | bytes) else v
                    for v in row
                ],
                default=str,
            ).decode()
            out.append((model._meta.label, text))
    return out


def test_provider_keys_pass_through_in_their_headers_and_are_never_stored_or_logged(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    server = proxy_key.server
    base = proxy_key.base
    ask("anthropic", base, "secret check one")
    with claude_for(base).messages.stream(
        model=CLAUDE, max_tokens=20, messages=[{"role": "user", "content": "streamed"}]
    ) as stream:
        stream.get_final_message()
    ask("openai", base, "secret check two")
    gpt_for(base).responses.create(model=GPT, input="secret check three")
    ask("gemini", base, "secret check four")
    with httpx.Client(timeout=10) as http:
        by_header = http.post(
            base + "/v1/messages",
            headers=RAW_HEADERS["anthropic"],
            json=raw_body("anthropic", [user_item("anthropic", "raw x-api-key")]),
        )
        by_query = http.post(
            f"{base}/v1beta/models/{GEM}:generateContent",
            params={"key": GEMINI_SECRET},
            json=raw_body("gemini", [user_item("gemini", "key in the query")]),
        )
        assert (by_header.status_code, by_query.status_code) == (200, 200)
        # Failures write error text: it must not carry a key either.
        fake.fail_next(500)
        failed = http.post(
            f"{base}/v1beta/models/{GEM}:generateContent",
            params={"key": GEMINI_SECRET},
            json=raw_body("gemini", [user_item("gemini", "fails")]),
        )
        assert failed.status_code == 500
        broken = http.post(
            f"{base}/v1beta/models/{GEM}:streamGenerateContent",
            params={"key": GEMINI_SECRET, "alt": "sse"},
            headers={"x-fake-break-after": "1"},
            json=raw_body("gemini", [user_item("gemini", "breaks off here")]),
        )
        assert "upstream stream broke" in broken.text
        dead = new_key(server, gemini=closed_port_url())
        unreachable = http.post(
            f"{dead.base}/v1beta/models/{GEM}:generateContent",
            params={"key": GEMINI_SECRET},
            json=raw_body("gemini", [user_item("gemini", "nobody home")]),
        )
        assert unreachable.status_code == 502
        # A browser on the dashboard's origin sends its session cookie along.
        with_cookie = http.post(
            base + "/v1/chat/completions",
            headers={**RAW_HEADERS["openai_chat"], "cookie": "sessionid=dashboard-session-123"},
            json=raw_body("openai_chat", [user_item("openai_chat", "cookie jar")]),
        )
        assert with_cookie.status_code == 200

    # The anthropic SDK picks its header (x-api-key or a Bearer token) by version.
    for recorded in fake.requests[:2]:
        for name, value in claude_for(base).auth_headers.items():
            assert recorded.headers[name.lower()] == value
    assert fake.requests[2].headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    assert fake.requests[3].headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    assert fake.requests[4].headers["x-goog-api-key"] == GEMINI_SECRET
    assert fake.requests[5].headers["x-api-key"] == ANTHROPIC_SECRET
    for recorded in fake.requests[6:9]:
        assert f"key={GEMINI_SECRET}" in recorded.query.split("&")
        assert "x-goog-api-key" not in recorded.headers
    assert len(fake.requests) == 10
    assert "cookie" not in fake.requests[9].headers
    for recorded in fake.requests:  # our own key never travels upstream
        assert proxy_key.raw not in repr(recorded)

    logs_of(proxy_key.account, 10)
    logs_of(dead.account, 1)
    secrets = [ANTHROPIC_SECRET, OPENAI_SECRET, GEMINI_SECRET, proxy_key.raw, dead.raw]
    rows = _texts_of_every_row()
    assert any(label == "telemetry_app.RequestLog" for label, _ in rows)
    leaks = [(label, s) for label, text in rows for s in secrets if s in text]
    assert leaks == []
    for path in server.log_path.parent.rglob("*"):
        if path.is_file():
            content = path.read_bytes().decode("latin-1")
            assert [s for s in secrets if s in content] == [], path


# ---------------------------------------------------------------- 10. live events


def _live_socket(server: Server, account: Account) -> ClientConnection:
    browser = DjangoClient()
    browser.force_login(account.owner)
    name = settings.SESSION_COOKIE_NAME
    cookie = browser.cookies[name].value
    return ws_connect(
        server.url.replace("http://", "ws://") + "/ws/live/",
        origin=server.url,  # type: ignore[arg-type]
        additional_headers={"Cookie": f"{name}={cookie}"},
        open_timeout=10,
    )


def _events_until(socket: ClientConnection, done_id: str) -> list[dict[str, Any]]:
    """Events received until ``request.done`` of request ``done_id`` (inclusive)."""
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(socket.recv(timeout=30))
        events.append(event)
        if event["type"] == "request.done" and event.get("request_id") == done_id:
            return events


def test_live_socket_streams_an_accounts_own_request_events_and_no_one_elses(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    server = proxy_key.server
    other = new_key(server)
    with (
        _live_socket(server, proxy_key.account) as mine,
        _live_socket(server, other.account) as theirs,
    ):
        ask("anthropic", proxy_key.base, "mine one")
        ask("anthropic", other.base, "theirs one")
        ask("openai", proxy_key.base, "mine two")
        ask("openai", other.base, "theirs two")
        my_logs, their_logs = logs_of(proxy_key.account, 2), logs_of(other.account, 2)
        mine_seen = _events_until(mine, my_logs[1].request_id)
        theirs_seen = _events_until(theirs, their_logs[1].request_id)

    for seen, own, foreign in (
        (mine_seen, my_logs, their_logs),
        (theirs_seen, their_logs, my_logs),
    ):
        kinds = [(e["type"], e["request_id"]) for e in seen if e["type"].startswith("request.")]
        own_ids = [log.request_id for log in own]
        assert sorted(kinds) == sorted(
            (t, i) for i in own_ids for t in ("request.started", "request.done")
        )
        for request_id in own_ids:
            assert kinds.index(("request.started", request_id)) < kinds.index(
                ("request.done", request_id)
            )
        leaked = {log.request_id for log in foreign} | {log.conversation_id for log in foreign}
        assert not {e.get("request_id") for e in seen} & leaked
        assert not {e.get("conversation_id") for e in seen} & leaked
    done = [e for e in mine_seen if e["type"] == "request.done"]
    assert [(e["status"], e["format"]) for e in done] == [(200, "anthropic"), (200, "openai_chat")]
    assert done[0]["model"] == CLAUDE
    assert int(done[0]["output_tokens"]) > 0


def _chat_stream_until(key: ProxyKey, headers: dict[str, str], stop: bytes) -> bytes:
    """Stream a chat completion and hang up as soon as ``stop`` has arrived."""
    body = {
        "model": GPT,
        "stream": True,
        "messages": [{"role": "user", "content": "one two three four five"}],
    }
    seen = b""
    with httpx.stream(
        "POST",
        f"{key.base}/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-test", **headers},
        timeout=30,
    ) as response:
        for chunk in response.iter_raw():
            seen += chunk
            if stop in seen:
                break
    return seen


def test_a_client_that_hangs_up_mid_stream_is_logged_and_keeps_no_half_reply(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    seen = _chat_stream_until(proxy_key, {"x-fake-delay": "0.3"}, b"Echo")
    assert b"[DONE]" not in seen
    [log] = logs_of(proxy_key.account)
    assert "client disconnected mid-stream" in log.error
    assert roles_in(log.conversation_id) == ["user"]


def test_a_client_that_hangs_up_right_after_the_final_event_keeps_its_reply(
    proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    # SDKs may close the connection as soon as they have read the final event,
    # before the proxy has ended the response: the client has the whole answer.
    seen = _chat_stream_until(proxy_key, {}, b"[DONE]")
    assert b"five" in seen  # the last word of the echo came before [DONE]
    [log] = logs_of(proxy_key.account)
    assert (log.status, log.error) == (200, "")
    assert roles_in(log.conversation_id) == ["user", "assistant"]


def _chat_reply(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": GPT,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def test_a_pooled_upstream_connection_closed_under_us_is_retried_once(
    proxy_server: Server, fake: FakeProvider
) -> None:
    server = ScriptedUpstream(("127.0.0.1", 0), _ClosingHandler)
    server.reply = (200, "application/json", json.dumps(_chat_reply("pong")).encode())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        key = new_key(proxy_server, openai=server.url)
        client = gpt_for(key.base)
        for _ in range(3):  # each request after the first meets a pooled connection that dies
            reply = client.chat.completions.create(
                model=GPT, messages=[{"role": "user", "content": "ping"}]
            )
            assert reply.choices[0].message.content.startswith("pong")
        logs = logs_of(key.account, 3)
        assert [(log.status, log.error) for log in logs] == [(200, "")] * 3
    finally:
        server.shutdown()
        thread.join(timeout=5)
