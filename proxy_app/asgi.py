"""The provider routes as a lean ASGI app (ARCHITECTURE.md, "The hot path").

``handle`` serves one request: resolve the vckey (cached), read the body under
the size limit, parse it with the route's format adapter, find the conversation
and what is new in the history, forward upstream through the pooled aiohttp
session, relay the answer (chunk by chunk for streams) with the session marker,
and hand a record of the exchange to the background writer. Our own processing
never blocks the user's call: if it fails, the original body is forwarded and
the failure is recorded with the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from django.conf import settings
from django.utils import timezone

from memory_app.engine.types import PayloadPlan
from memory_app.services.planning import payload_plan_for_request
from proxy_app import upstream
from proxy_app.db import db_call
from proxy_app.errors import (
    BadRequest,
    ClientGone,
    InjectedFault,
    NotFound,
    ProxyError,
    TooLarge,
    Unauthorized,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy_app.formats import ADAPTERS, turns_of
from proxy_app.formats.envelope import envelopes_strip, may_carry_envelopes
from proxy_app.formats.marker import marker_text
from proxy_app.formats.recall import planned_body
from proxy_app.formats.types import Exchange, FormatError, Reply
from proxy_app.keys import ResolvedKey, key_cache_watch, key_resolve
from proxy_app.relay import relay_stream, send_response
from proxy_app.routes import Route, guess_format, is_proxy_path, route_match
from proxy_app.services import ExchangeRecord, TurnRecord
from proxy_app.sessions import (
    ConversationState,
    conversation_resolve,
    history_diff,
    marker_token,
    turn_hash,
)
from proxy_app.writer import event_submit, record_submit
from vcloud.lifespan import on_shutdown, on_startup

log = logging.getLogger(__name__)

__all__ = ["handle", "is_proxy_path"]

_JSON = [(b"content-type", b"application/json")]
# Request ids: unique per process start, cheap per request (no urandom call).
_ID_PREFIX = f"{uuid.uuid4().hex[:12]}-"
_ids = itertools.count(1)
_KEY_SHOWN = 12  # characters of a vckey that may appear in logs and errors (its prefix)


@dataclass(slots=True)
class Context:
    """One request in flight."""

    route: Route
    key: ResolvedKey
    headers: dict[str, str]
    started: float
    request_id: str = field(default_factory=lambda: f"{_ID_PREFIX}{next(_ids):x}")
    exchange: Exchange | None = None
    state: ConversationState | None = None
    record: ExchangeRecord | None = None
    upstream_body: bytes = b""
    marker: str | None = None
    error: str = ""
    reply_kept: bool = False  # the reply's turns are in the record and the state
    plan: PayloadPlan | None = None


async def handle(scope: dict[str, Any], receive: Any, send: Any) -> None:
    started = time.perf_counter()
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    path, query = scope["path"], scope["query_string"].decode("latin-1")
    route = route_match(scope["method"], path, query, headers)
    fmt = route.format if route else guess_format(path, headers)
    try:
        if route is None:
            raise NotFound(f"Unknown path {scope['method']} {_shown(path)}")
        key = await key_resolve(route.raw_key)
        if key is None:
            raise Unauthorized("Invalid or revoked vckey. Put it in the base URL as /v/<vckey>.")
        body = await _read_body(receive, headers)
        ctx = Context(route, key, headers, started)
        await _serve(ctx, scope, body, receive, send)
    except ProxyError as exc:
        await _send_error(send, fmt, exc.status, exc.message)
    except ClientGone:
        return
    except Exception:
        log.exception("proxy failed on %s", _shown(path))
        await _send_error(send, fmt, 500, "The vcloud proxy failed on this request.")


def _shown(path: str) -> str:
    """``path`` with the vckey cut to its public prefix, for error bodies and logs."""
    if not path.startswith("/v/"):
        return path
    key, slash, rest = path[3:].partition("/")
    return f"/v/{key[:_KEY_SHOWN]}…{slash}{rest}"


async def _send_error(send: Any, fmt: str, status: int, message: str) -> None:
    body = orjson.dumps(ADAPTERS[fmt].error_body(status, message))
    try:
        await send_response(send, status, _JSON, body)
    except Exception:  # the response had already started; nothing more to say
        log.debug("could not send the %s error", status)


async def _read_body(receive: Any, headers: dict[str, str]) -> bytes:
    limit = settings.VC_MAX_BODY_BYTES
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"Request body of {declared} bytes is over the {limit}-byte limit.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"Request body is over the {limit}-byte limit.")
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _serve(ctx: Context, scope: dict[str, Any], body: bytes, receive: Any, send: Any) -> None:
    ctx.upstream_body = body
    stream = False
    if ctx.route.conversational:
        ctx.exchange = _parse(ctx, body)
        stream = ctx.exchange.stream
        try:
            await _prepare(ctx, body)
        except Exception as exc:  # our side failed: forward the client's request unmodified
            log.exception("processing failed; forwarding unmodified")
            ctx.error = f"forwarded unmodified: {type(exc).__name__}: {exc}"[:500]
            ctx.upstream_body, ctx.marker = body, None
    ctx.record = _record(ctx, stream)
    event_submit(ctx.key.account_id, "request.started", _started_event(ctx.record))
    try:
        await _forward(ctx, scope, receive, send, stream)
    finally:
        record_submit(ctx.record)  # the writer announces request.done once it is stored


def _parse(ctx: Context, body: bytes) -> Exchange:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Request body is not valid JSON: {exc}") from exc
    try:
        return ADAPTERS[ctx.route.format].parse_request(
            data, model=ctx.route.model, stream=ctx.route.stream
        )
    except FormatError as exc:
        raise BadRequest(str(exc)) from exc


async def _prepare(ctx: Context, body: bytes) -> None:
    """Find the conversation, note the new turns, build the upstream body."""
    if settings.VC_FAULT_INJECTION and ctx.headers.get("x-vc-fault") == "process":
        raise InjectedFault("fault injected by x-vc-fault")
    exchange = ctx.exchange
    assert exchange is not None
    session_id = ctx.headers.get("x-vc-session", "")[:200]
    ctx.state = await conversation_resolve(ctx.key, exchange, session_id)
    if not session_id and ctx.headers.get("x-vc-passthrough") != "1":
        ctx.marker = marker_text(marker_token(ctx.key.account_id, ctx.state.id))
    if ctx.headers.get("x-vc-passthrough") == "1":
        return  # the client's bytes go upstream as they are
    adapter = ADAPTERS[exchange.format]
    ceiling = _ceiling(ctx)
    # Fast path: a JSON body of at most 4 × ceiling bytes holds fewer tokens than
    # the ceiling, so nothing needs planning (and nothing leaves the loop).
    if len(body) > 4 * ceiling:
        plan = await db_call(
            payload_plan_for_request,
            account_id=ctx.key.account_id,
            conversation_id=ctx.state.id,
            exchange=exchange,
            ceiling=ceiling,
            cache_aware=ctx.key.cache_aware_layout,
        )
        ctx.plan = plan
        if plan is not None and not plan.passthrough:
            ctx.upstream_body = orjson.dumps(planned_body(adapter, exchange, plan))
            return
    items = None
    if may_carry_envelopes(body):
        items = envelopes_strip(exchange.format, [t.item for t in exchange.turns])
    if exchange.marker is not None or items is not None:
        ctx.upstream_body = orjson.dumps(adapter.render_request(exchange, items=items))


def _ceiling(ctx: Context) -> int:
    """``X-VC-Context-Ceiling`` if valid, else the key's (or its account's) ceiling."""
    asked = ctx.headers.get("x-vc-context-ceiling", "")
    if asked.isdigit() and 1_000 <= int(asked) <= 10_000_000:
        return int(asked)
    return ctx.key.context_ceiling


def _record(ctx: Context, stream: bool) -> ExchangeRecord:
    exchange, state = ctx.exchange, ctx.state
    record = ExchangeRecord(
        request_id=ctx.request_id,
        account_id=ctx.key.account_id,
        key_id=ctx.key.key_id,
        conversation_id=state.id if state else None,
        format=ctx.route.format,
        provider=ctx.route.provider,
        path=ctx.route.upstream_path,
        model=(exchange.model if exchange else "") or "",
        stream=stream,
        status=0,
        created_at=timezone.now(),
        passthrough=ctx.headers.get("x-vc-passthrough") == "1",
        error=ctx.error,
        ledger=ctx.route.conversational,
    )
    if exchange is not None and state is not None:
        hashes = [turn_hash(t) for t in exchange.turns]
        skip, position, replaced = history_diff(state.hashes, hashes)
        record.turns = [
            TurnRecord(position + i, t.role, t.item, t.text, h)
            for i, (t, h) in enumerate(zip(exchange.turns[skip:], hashes[skip:], strict=True))
        ]
        record.replaced_from = replaced
        state.hashes[position:] = hashes[skip:]
        record.turn_count = len(state.hashes)
    if ctx.plan is not None and state is not None:
        record.context = _context(ctx, ctx.plan)
    return record


def _context(ctx: Context, plan: PayloadPlan) -> dict[str, Any]:
    """The request's context record (``memory_app.models.RequestContext``)."""
    planned = not plan.passthrough and not ctx.error  # a failed plan was not applied
    capture = ctx.key.capture_payloads and planned
    report = plan.report
    return {
        "ceiling": report.get("ceiling", 0),
        "planned": planned,
        "client_tokens": report.get("client_tokens", 0),
        "upstream_tokens": report.get("upstream_tokens", 0)
        if planned
        else report.get("client_tokens", 0),
        "report": report,
        "payload": ctx.upstream_body.decode("utf-8", "replace") if capture else "",
    }


async def _forward(
    ctx: Context, scope: dict[str, Any], receive: Any, send: Any, stream: bool
) -> None:
    record = ctx.record
    assert record is not None
    url = upstream.upstream_url(ctx.route, ctx.key)
    headers = upstream.request_headers(scope["headers"])
    sent = time.perf_counter()
    record.overhead_ms = round((sent - ctx.started) * 1000, 3)
    try:
        response = await upstream.request(scope["method"], url, ctx.upstream_body, headers)
    except TimeoutError as exc:
        record.status, record.error = 504, _join(record.error, "upstream timed out")
        raise UpstreamTimeout("The upstream provider did not answer in time.") from exc
    except aiohttp.ClientError as exc:
        record.status, record.error = 502, _join(record.error, f"upstream unreachable: {exc}")
        raise UpstreamUnreachable(f"The upstream provider could not be reached: {exc}") from exc
    record.status = response.status
    out_headers = upstream.response_headers(response.headers) + _vc_headers(ctx)
    try:
        reply = await _answer(ctx, response, out_headers, receive, send, stream)
    finally:
        record.upstream_ms = round((time.perf_counter() - sent) * 1000, 3)
    if reply is not None:
        _record_reply(ctx, reply)


def _vc_headers(ctx: Context) -> list[tuple[bytes, bytes]]:
    out = [(b"x-vc-overhead-ms", str(ctx.record.overhead_ms).encode())]  # type: ignore[union-attr]
    if ctx.state is not None:
        out.append((b"x-vc-conversation", str(ctx.state.id).encode()))
    return out


async def _answer(
    ctx: Context,
    response: aiohttp.ClientResponse,
    headers: list[tuple[bytes, bytes]],
    receive: Any,
    send: Any,
    stream: bool,
) -> Reply | None:
    adapter = ADAPTERS[ctx.route.format]
    ok = response.status < 300 and ctx.route.conversational
    content_type = response.headers.get("content-type", "")
    if ok and stream and content_type.startswith(("text/event-stream", "application/json")):
        observer = adapter.StreamObserver(ctx.marker)
        sse = content_type.startswith("text/event-stream")
        relay = relay_stream(
            send,
            response,
            headers,
            adapter,
            observer,
            sse=sse,
            on_complete=lambda whole: _reply_keep(ctx, whole),
        )
        reply = await _watched(send, receive, relay)
        if reply is None and ctx.reply_kept:
            # The client left after the final event (SDKs may close at once): it
            # has the whole answer, so this is no error.
            reply = observer.result()
        elif reply is None:
            ctx.record.error = _join(ctx.record.error, "client disconnected mid-stream")  # type: ignore[union-attr]
        return reply
    try:
        body = await response.read()
    except TimeoutError as exc:
        ctx.record.status = 504  # type: ignore[union-attr]
        ctx.record.error = _join(ctx.record.error, "upstream body timed out")  # type: ignore[union-attr]
        raise UpstreamTimeout("The upstream provider did not finish its answer in time.") from exc
    except aiohttp.ClientError as exc:
        ctx.record.status = 502  # type: ignore[union-attr]
        ctx.record.error = _join(ctx.record.error, f"upstream body broke: {exc}")  # type: ignore[union-attr]
        raise UpstreamUnreachable("The upstream response broke off.") from exc
    finally:
        response.release()
    if not ok:
        await send_response(send, response.status, headers, body)
        return None
    reply, body = _buffered_reply(ctx, adapter, body)
    if reply is not None:
        _reply_keep(ctx, reply)  # before the client can read it and ask again
    await send_response(send, response.status, headers, body)
    return reply


def _buffered_reply(ctx: Context, adapter: Any, body: bytes) -> tuple[Reply | None, bytes]:
    try:
        data = orjson.loads(body)
        reply = adapter.parse_response(data)
        if ctx.marker:
            body = orjson.dumps(adapter.add_marker(data, ctx.marker))
        return reply, body
    except Exception as exc:  # an answer we cannot read still reaches the client as it came
        log.exception("unreadable upstream response")
        reason = f"unreadable upstream response: {type(exc).__name__}: {exc}"[:500]
        ctx.record.error = _join(ctx.record.error, reason)  # type: ignore[union-attr]
        return None, body


async def _watched(send: Any, receive: Any, relay: Any) -> Reply | None:
    """Run the relay; if the client disconnects, stop it (closing the upstream)."""
    task = asyncio.ensure_future(relay)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _record_reply(ctx: Context, reply: Reply) -> None:
    record = ctx.record
    assert record is not None
    usage = reply.usage
    record.upstream_tokens = usage.input_tokens
    record.client_tokens = _client_tokens(record, usage.input_tokens)
    record.cached_tokens = usage.cache_read_tokens
    record.cache_write_tokens = usage.cache_write_tokens
    record.output_tokens = usage.output_tokens
    record.model = reply.model or record.model
    record.error = _join(record.error, reply.error)
    _reply_keep(ctx, reply)


def _client_tokens(record: ExchangeRecord, upstream: int) -> int:
    """What the client's own request would have cost in input tokens: the
    provider's count when we forwarded it as sent, else that count scaled by
    our tokenizer's ratio of the history as sent to the payload as planned."""
    context = record.context
    if not context or not context["planned"]:
        return upstream
    sent, planned = context["client_tokens"], context["upstream_tokens"]
    if not upstream:
        return int(sent)
    return round(upstream * sent / planned) if planned else upstream


def _reply_keep(ctx: Context, reply: Reply) -> None:
    """Add the reply's turns to the record and to the conversation's known
    hashes, once. Called as soon as the reply is whole, before its last bytes
    reach the client, so that the client's next request diffs against it."""
    record, state = ctx.record, ctx.state
    assert record is not None
    # A reply that broke off or carried an error is not an answer the client keeps.
    if ctx.reply_kept or state is None or not reply.items or record.status >= 300 or reply.error:
        return
    ctx.reply_kept = True
    turns = turns_of(ctx.route.format, reply.items)
    start = len(state.hashes)
    for i, turn in enumerate(turns):
        digest = turn_hash(turn)
        state.hashes.append(digest)
        record.turns.append(TurnRecord(start + i, turn.role, turn.item, turn.text, digest))
    record.turn_count = len(state.hashes)


def _join(first: str, second: str) -> str:
    return f"{first}; {second}" if first and second else first or second


def _started_event(record: ExchangeRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "conversation_id": record.conversation_id,
        "format": record.format,
        "model": record.model,
        "stream": record.stream,
        "created_at": record.created_at.isoformat(),
    }


_watch_task: asyncio.Task[None] | None = None


@on_startup
async def proxy_start() -> None:
    global _watch_task
    # Everything imported so far lives as long as the process: keep it out of
    # the cyclic collector, and collect the young generation less often, so a
    # full collection does not stall the loop for tens of milliseconds.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    # The writer thread's Python work would otherwise hold the GIL for the
    # default 5 ms whenever the loop wakes from I/O (the convoy effect).
    sys.setswitchinterval(0.0005)
    _watch_task = asyncio.get_running_loop().create_task(key_cache_watch(), name="vc-key-watch")


@on_shutdown
async def proxy_stop() -> None:
    if _watch_task is not None:
        _watch_task.cancel()
