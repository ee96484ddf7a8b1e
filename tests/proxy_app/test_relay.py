"""The streaming relay, against the fake provider over real HTTP.

A client may send its next request the moment it has read a reply's final
event; the proxy must know the reply by then, or it would diff the next
history against a conversation that lacks the reply and store it twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from proxy_app.formats import ADAPTERS
from proxy_app.formats.types import Reply
from proxy_app.relay import relay_stream
from tests.fakes.provider import RunningFake

ASK = "hello relay"

# format → (path, body, bytes that only the final event carries)
STREAMS: dict[str, tuple[str, dict[str, Any], bytes]] = {
    "anthropic": (
        "/v1/messages",
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": ASK}],
        },
        b"message_stop",
    ),
    "openai_chat": (
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": ASK}]},
        b"[DONE]",
    ),
    "openai_responses": (
        "/v1/responses",
        {"model": "gpt-4o-mini", "stream": True, "input": ASK},
        b"response.completed",
    ),
    "gemini": (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": ASK}]}]},
        b"finishReason",
    ),
}


async def _relay(url: str, fmt: str, marker: str | None) -> tuple[list[Reply], bytes, bytes]:
    """Relay one streamed reply; returns (replies seen by on_complete, bytes sent
    before on_complete ran, all bytes sent)."""
    path, body, _ = STREAMS[fmt]
    sent: list[bytes] = []
    seen: list[Reply] = []
    before: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])

    def on_complete(reply: Reply) -> None:
        seen.append(reply)
        before.append(b"".join(sent))

    headers = {"x-api-key": "k", "authorization": "Bearer k", "x-fake-delay": "0.005"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, json=body, headers=headers) as response,
    ):
        assert response.status == 200
        observer = ADAPTERS[fmt].StreamObserver(marker)
        final = await relay_stream(
            send, response, [], ADAPTERS[fmt], observer, on_complete=on_complete
        )
    assert final.complete
    assert not final.error
    return seen, before[0] if before else b"", b"".join(sent)


@pytest.mark.parametrize("marker", [None, "<!-- vc:c1.test -->"])
@pytest.mark.parametrize("fmt", sorted(STREAMS))
def test_the_reply_is_known_before_its_final_event_reaches_the_client(
    fake_provider: RunningFake, fmt: str, marker: str | None
) -> None:
    seen, before, everything = asyncio.run(_relay(fake_provider.url, fmt, marker))
    final_bytes = STREAMS[fmt][2]

    assert len(seen) == 1  # once, not again at the end
    reply = seen[0]
    assert reply.complete
    assert ASK in str(reply.items)  # the whole echo, not a prefix
    assert final_bytes in everything
    assert final_bytes not in before
    if marker:
        assert marker.encode() in everything
        assert marker not in str(reply.items)  # the stored reply never holds the marker
