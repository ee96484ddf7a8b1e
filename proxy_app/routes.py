"""Which provider route a request path names, and where its vckey is.

``route_match(method, path, query, headers)`` splits the optional key prefix
(``/v/<vckey>``) from the provider path and classifies it. Conversational routes
(messages, chat completions, responses, generateContent) are stored and planned;
the others (count_tokens, models) are relayed as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from proxy_app.formats.types import Format

PROXY_PREFIXES = ("/v/", "/v1/", "/v1beta/")
_GEMINI = re.compile(r"^/(v1beta|v1)/models/([^/:]+):([A-Za-z]+)$")


@dataclass(frozen=True, slots=True)
class Route:
    format: Format
    provider: str  # "anthropic" | "openai" | "gemini": which upstream
    upstream_path: str  # the provider path, prefix removed
    upstream_query: str  # the query without our vckey
    conversational: bool
    raw_key: str
    model: str | None = None  # from the URL (Gemini)
    stream: bool | None = None  # from the URL (Gemini)


def is_proxy_path(path: str) -> bool:
    return path.startswith(PROXY_PREFIXES)


def guess_format(path: str, headers: dict[str, str]) -> Format:
    """The format to answer in when the route itself is unknown (for 401/404)."""
    if "generatecontent" in path.lower() or "x-goog-api-key" in headers or "/v1beta/" in path:
        return "gemini"
    if "/messages" in path or "x-api-key" in headers or "anthropic-version" in headers:
        return "anthropic"
    if "/responses" in path:
        return "openai_responses"
    return "openai_chat"


def split_key(path: str, query: str, headers: dict[str, str]) -> tuple[str, str, str]:
    """(raw key, provider path, query without ``vckey``)."""
    raw = ""
    if path.startswith("/v/"):
        raw, _, rest = path[3:].partition("/")
        path = "/" + rest
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(k == "vckey" for k, _ in pairs):
        raw = raw or next(v for k, v in pairs if k == "vckey")
        query = urlencode([(k, v) for k, v in pairs if k != "vckey"])
    return raw or headers.get("x-vc-key", ""), path, query


def route_match(method: str, path: str, query: str, headers: dict[str, str]) -> Route | None:
    raw, path, query = split_key(path, query, headers)
    base = {"upstream_path": path, "upstream_query": query, "raw_key": raw}
    if method == "POST":
        if path == "/v1/messages":
            return Route("anthropic", "anthropic", conversational=True, **base)
        if path == "/v1/messages/count_tokens":
            return Route("anthropic", "anthropic", conversational=False, **base)
        if path == "/v1/chat/completions":
            return Route("openai_chat", "openai", conversational=True, **base)
        if path == "/v1/responses":
            return Route("openai_responses", "openai", conversational=True, **base)
        match = _GEMINI.match(path)
        if match:
            action = match.group(3)
            conversational = action in ("generateContent", "streamGenerateContent")
            stream = action == "streamGenerateContent"
            return Route(
                "gemini",
                "gemini",
                conversational=conversational,
                model=match.group(2),
                stream=stream,
                **base,
            )
        return None
    if method == "GET" and (path == "/v1/models" or path.startswith("/v1/models/")):
        # Both Anthropic and OpenAI serve /v1/models: Anthropic clients say so.
        if "anthropic-version" in headers or "x-api-key" in headers:
            return Route("anthropic", "anthropic", conversational=False, **base)
        return Route("openai_chat", "openai", conversational=False, **base)
    if method == "GET" and path.startswith(("/v1beta/models", "/v1/models")):
        return Route("gemini", "gemini", conversational=False, **base)
    return None
