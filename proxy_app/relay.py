"""Sending the upstream response back: buffered for JSON, chunk by chunk for SSE.

``relay_stream`` is the streaming path: each upstream chunk is passed to the
format's observer (which returns the same bytes, or once the bytes with the
session marker spliced in) and sent on at once with ``more_body``. The upstream
response is always released in ``finally``; a broken upstream stream ends with
the provider's own error event so the SDK raises as it would against the
provider, unless the provider's own error event already did. The reply's
``error`` keeps the provider's message and ours. No database work happens in
here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from proxy_app.formats.types import Reply

log = logging.getLogger(__name__)

Send = Any


async def send_response(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def relay_stream(
    send: Send,
    response: aiohttp.ClientResponse,
    headers: list[tuple[bytes, bytes]],
    adapter: Any,
    observer: Any,
    *,
    sse: bool = True,
    on_complete: Callable[[Reply], None] | None = None,
) -> Reply:
    """Relay a streamed response; returns what the observer saw.

    ``on_complete`` gets the reply as soon as the observer has seen the final
    event, before the bytes holding it go out: a client that sends its next
    request the moment it has read the reply finds the reply already known.
    """
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    error = ""
    try:
        async for chunk in response.content.iter_any():
            out = observer.feed(chunk)
            if on_complete is not None and observer.complete:
                on_complete(observer.result())
                on_complete = None
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        tail = observer.flush() if hasattr(observer, "flush") else b""
        if tail:
            await send({"type": "http.response.body", "body": tail, "more_body": True})
    except (TimeoutError, aiohttp.ClientError) as exc:
        error = f"upstream stream broke: {type(exc).__name__}: {exc}"[:500]
        log.warning("%s", error)
    finally:
        response.release()
    reply: Reply = observer.result()
    if not error and sse and not reply.complete and not reply.error:
        error = "upstream stream ended before its final event"
    if error and not reply.error:  # the provider's own error event has told the client already
        await send(
            {"type": "http.response.body", "body": adapter.stream_error(error), "more_body": True}
        )
    await send({"type": "http.response.body", "body": b""})
    reply.error = "; ".join(e for e in (reply.error, error) if e)
    return reply
