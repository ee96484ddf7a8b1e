"""Which base URLs an account may send its provider traffic to.

An account can point each provider format at its own upstream (a gateway, a
self-hosted model server). On a shared deployment that must not reach the
server's own network: a loopback, private, link-local (cloud metadata) or
otherwise reserved address would let any user make the proxy call internal
services. ``upstream_problem(url)`` says why a URL is refused, or returns ""
when it is acceptable. ``settings.VC_PRIVATE_UPSTREAMS`` allows such addresses
(the embedded single-machine default, where a model server on localhost is the
point); production settings refuse them unless it is set.

Host names are resolved once, when the setting is saved; a name whose address
later changes (DNS rebinding) is not re-checked per request.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


def upstream_problem(url: str) -> str:
    """Why ``url`` may not be an account's upstream, or "" when it may."""
    if not url or settings.VC_PRIVATE_UPSTREAMS:
        return ""
    host = urlsplit(url).hostname or ""
    if not host:
        return "The URL has no host."
    for address in _addresses(host):
        if _internal(address):
            return (
                f"{host} is an internal address ({address}): this server does not send "
                "provider traffic to its own network."
            )
    return ""


def _addresses(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []  # unknown now: the upstream call will fail, and say so
    return sorted({str(info[4][0]) for info in found})


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast
