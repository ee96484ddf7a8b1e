"""Errors the proxy raises itself, answered in the client's own format."""

from __future__ import annotations


class ProxyError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ProxyError):
    status = 400


class Unauthorized(ProxyError):
    status = 401


class NotFound(ProxyError):
    status = 404


class TooLarge(ProxyError):
    status = 413


class UpstreamUnreachable(ProxyError):
    status = 502


class UpstreamTimeout(ProxyError):
    status = 504


class ClientGone(Exception):
    """The client disconnected before we answered."""


class InjectedFault(RuntimeError):
    """Raised on request (x-vc-fault) when VC_FAULT_INJECTION is on: tests of the fallback."""
