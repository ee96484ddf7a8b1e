"""The upstream hop: one pooled aiohttp session per process.

Created lazily on first use and closed at shutdown (lifespan). Responses are
decompressed by aiohttp, so the relay drops ``content-encoding``/``content-length``
and lets the server frame the bytes it sends.
"""

from __future__ import annotations

import logging

import aiohttp
from django.conf import settings

from proxy_app.keys import ResolvedKey
from proxy_app.routes import Route
from vcloud.lifespan import on_shutdown

log = logging.getLogger(__name__)

_session: aiohttp.ClientSession | None = None

# Never forwarded in either direction (RFC 9110 hop-by-hop, framing, our own).
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)


def session() -> aiohttp.ClientSession:
    global _session
    if _session is None or _session.closed:
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=settings.VC_UPSTREAM_CONNECT_TIMEOUT,
            sock_read=settings.VC_UPSTREAM_READ_TIMEOUT,
        )
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
        _session = aiohttp.ClientSession(
            timeout=timeout,
            connector=connector,
            auto_decompress=True,
            skip_auto_headers=("User-Agent", "Content-Type", "Accept", "Accept-Encoding"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
    return _session


async def request(
    method: str, url: str, body: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """Send one request upstream. A pooled connection the server had already
    closed (an idle keep-alive timing out as we reuse it: uvicorn-based
    servers such as vLLM close after 5 s) fails before any answer arrives;
    that one failure is retried once on a fresh connection."""
    try:
        return await session().request(method, url, data=body or None, headers=headers)
    except aiohttp.ClientConnectorError:
        raise  # no connection was made: nothing stale to retry
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        log.info("upstream connection was closed under us (%s); retrying once", exc)
        return await session().request(method, url, data=body or None, headers=headers)


@on_shutdown
async def session_close() -> None:
    global _session
    if _session is not None:
        await _session.close()
        _session = None


def upstream_url(route: Route, key: ResolvedKey) -> str:
    base = key.upstreams.get(route.provider) or settings.VC_UPSTREAM[route.provider]
    url = base.rstrip("/") + route.upstream_path
    return f"{url}?{route.upstream_query}" if route.upstream_query else url


# Never sent upstream: cookies a client sends us are our origin's (the dashboard
# session), not the provider's, whose cookies are scoped to its own domain.
_OURS = frozenset({"cookie"})


def request_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Client headers to send upstream: credentials untouched, ours and hop-by-hop dropped."""
    out: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in _HOP or name in _OURS or name.startswith("x-vc-"):
            continue
        value = raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def response_headers(headers: aiohttp.typedefs.LooseHeaders) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers.items()  # type: ignore[union-attr]
        if name.lower() not in _HOP
    ]
