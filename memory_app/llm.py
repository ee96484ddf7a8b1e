"""The one small LLM client of the internal roles (tagger, compactor, fact
extractor, supersession, tool loop).

Contract
--------
- ``llm_settings_for(account)`` gives the LLM an account's roles use: the
  account's own ``memory_settings["llm"]`` (``format``, ``base_url``, ``model``,
  optional ``api_key``) when complete, else ``settings.VC_LLM`` when its format,
  base URL and model are set, else ``None``: the caller then uses the local
  deterministic roles. An unknown format or a base URL that is not http(s) is
  ignored with a warning.
- ``LLMClient(settings, account_id=…, conversation_id=…)`` is the engine's
  ``LLM`` protocol: ``complete(role=, system=, prompt=, max_tokens=)`` returns
  the model's text, at temperature 0, over the OpenAI chat-completions or the
  Anthropic messages wire format. It is synchronous (roles run in background
  workers and threads) and shares one ``httpx.Client`` per process and base URL.
- Connect errors, timeouts, 408, 429 and 5xx are retried up to
  ``max_retries`` times with exponential backoff and jitter, or after the
  server's ``Retry-After`` (capped at ``RETRY_AFTER_MAX``). Any other non-2xx,
  an exhausted retry budget or an unreadable reply raise ``LLMError``.
- Every call writes exactly one ``LLMCall`` ledger row, success or failure:
  component = role, the provider (the wire format), model, tokens from the
  reply's usage, cost from the price catalog, and the duration of the whole
  call, retries included. A call that failed for good is recorded with zero
  tokens and zero cost, so failures show in the ledger's counts and durations
  without inflating spend. ``request_id`` stays blank: these calls belong to no
  proxied request.
- The API key goes into the auth header only. It is not in ``repr(settings)``,
  any log line (those name the model and host), any ``LLMError`` message (the
  provider's error text is quoted with the key redacted) or the ledger.
- ``complete_json(llm, …)`` asks for a JSON object and parses it with
  ``json_from_model_text``; an unparseable reply raises ``LLMError``.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings as django_settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from memory_app.engine.jsontext import json_from_model_text
from memory_app.errors import LLMError
from telemetry_app.models import Component, LLMCall
from telemetry_app.pricing import call_cost, price_lookup
from telemetry_app.rollups import ledger_dict, rollups_add

if TYPE_CHECKING:
    from memory_app.engine.types import LLM
    from vcloud.accounts.models import Account

log = logging.getLogger(__name__)

FORMATS = ("openai", "anthropic")
ANTHROPIC_VERSION = "2023-06-01"
BACKOFF_BASE = 0.5  # seconds before the first retry; doubles with each retry
BACKOFF_MAX = 8.0
RETRY_AFTER_MAX = 30.0  # a longer Retry-After is cut to this
ERROR_EXCERPT = 300  # characters of a provider's error text quoted in LLMError
# The ledger components that are LLM roles (the proxy's upstream hop and the
# embedder are recorded elsewhere).
ROLES = frozenset(
    c.value
    for c in (
        Component.TAGGER,
        Component.COMPACTOR,
        Component.FACT_EXTRACTOR,
        Component.SUPERSESSION,
        Component.TOOL_LOOP,
    )
)
_RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def _retryable(status: int) -> bool:
    return status in (408, 429) or status >= 500


# ------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class LLMSettings:
    format: str  # openai | anthropic
    base_url: str
    api_key: str = field(repr=False)
    model: str
    timeout: float = 60.0  # seconds per attempt
    max_retries: int = 3
    backoff: float = BACKOFF_BASE  # seconds before the first retry

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"LLM format must be one of {FORMATS}, not {self.format!r}")
        if self.max_retries < 0 or self.timeout <= 0:
            raise ValueError("LLM max_retries must be >= 0 and timeout > 0")

    @property
    def host(self) -> str:
        """Host and port of the base URL, for log lines (never any credentials)."""
        parts = urlsplit(self.base_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def llm_settings_for(account: Account) -> LLMSettings | None:
    """The LLM of an account's roles, or None for the local deterministic roles."""
    memory = account.memory_settings if isinstance(account.memory_settings, dict) else {}
    for source in (memory.get("llm"), getattr(django_settings, "VC_LLM", None)):
        found = _settings_from(source)
        if found is not None:
            return found
    return None


def _settings_from(data: Any) -> LLMSettings | None:
    if not isinstance(data, dict):
        return None
    fmt, base_url, model = (str(data.get(k) or "").strip() for k in ("format", "base_url", "model"))
    if not (fmt and base_url and model):
        return None
    parts = urlsplit(base_url)
    if fmt not in FORMATS or parts.scheme not in ("http", "https") or not parts.hostname:
        log.warning(
            "ignoring LLM settings: format %r, model %r, host %r", fmt, model, parts.hostname
        )
        return None
    return LLMSettings(fmt, base_url.rstrip("/"), str(data.get("api_key") or ""), model)


# -------------------------------------------------------------- HTTP clients

# One pooled client per process and base URL (keyed by pid too, so a forked
# worker never reuses its parent's sockets). httpx.Client is thread-safe.
_clients: dict[tuple[int, str], httpx.Client] = {}
_clients_lock = threading.Lock()


def _http_client(base_url: str) -> httpx.Client:
    key = (os.getpid(), base_url)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = httpx.Client(follow_redirects=False)
    return client


def llm_clients_close() -> None:
    """Close this process's pooled clients (at shutdown, or between tests)."""
    with _clients_lock:
        for (pid, _), client in list(_clients.items()):
            if pid == os.getpid():
                client.close()
        _clients.clear()


def retry_delay(response: httpx.Response | None, attempt: int, base: float) -> float:
    """Seconds to wait before retrying after failed attempt ``attempt`` (0-based):
    the server's Retry-After when it sent one (capped), else exponential backoff
    with jitter."""
    hinted = _retry_after(response) if response is not None else None
    if hinted is not None:
        return min(max(hinted, 0.0), RETRY_AFTER_MAX)
    return min(BACKOFF_MAX, base * 2.0**attempt) * random.uniform(0.5, 1.0)


def _retry_after(response: httpx.Response) -> float | None:
    millis = response.headers.get("retry-after-ms")
    raw = response.headers.get("retry-after")
    try:
        if millis is not None:
            return float(millis) / 1000
        if raw is not None:
            return float(raw)
    except ValueError:
        pass
    if raw is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


# ---------------------------------------------------------------- wire formats


@dataclass(slots=True)
class _Usage:
    input: int = 0  # whole prompt, cache included
    output: int = 0
    cached: int = 0
    cache_write: int = 0


def _endpoint(base_url: str, path: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/{path}" if base.endswith("/v1") else f"{base}/v1/{path}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _request(
    s: LLMSettings, system: str, prompt: str, max_tokens: int
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """URL, headers and body of one completion in the settings' wire format."""
    user = {"role": "user", "content": prompt}
    if s.format == "anthropic":
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if s.api_key:
            headers["x-api-key"] = s.api_key
        body: dict[str, Any] = {"model": s.model, "max_tokens": max_tokens, "messages": [user]}
        if system:
            body["system"] = system
        body["temperature"] = 0
        return _endpoint(s.base_url, "messages"), headers, body
    headers = {"authorization": f"Bearer {s.api_key}"} if s.api_key else {}
    messages = ([{"role": "system", "content": system}] if system else []) + [user]
    body = {"model": s.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
    return _endpoint(s.base_url, "chat/completions"), headers, body


# (base URL, model) → chat-completions parameters that model refused. A cache
# of the process: a new process finds out again with one refused call.
_REFUSED: dict[tuple[str, str], frozenset[str]] = {}
_ADAPTABLE = ("max_tokens", "temperature")


def _refused_params(error: LLMError) -> set[str]:
    """The adaptable parameters an OpenAI 400 says the model does not support."""
    text = str(error)
    if "nsupported" not in text:
        return set()
    return {name for name in _ADAPTABLE if f"'{name}'" in text}


def _adapted(body: dict[str, Any], refused: frozenset[str]) -> dict[str, Any]:
    if not refused:
        return body
    out = {k: v for k, v in body.items() if k not in refused}
    if "max_tokens" in refused and "max_tokens" in body:
        out["max_completion_tokens"] = body["max_tokens"]
    return out


def _usage(fmt: str, data: dict[str, Any]) -> _Usage:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return _Usage()
    if fmt == "anthropic":
        cached = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        uncached = _count(usage.get("input_tokens"))
        return _Usage(
            uncached + cached + written, _count(usage.get("output_tokens")), cached, written
        )
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return _Usage(
        _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), cached
    )


def _text(fmt: str, data: dict[str, Any]) -> str | None:
    """The reply's text, or None when the reply has no recognisable shape."""
    if fmt == "anthropic":
        blocks = data.get("content")
        if not isinstance(blocks, list):
            return None
        return "".join(
            b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    choices = data.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return content if isinstance(content, str) else ""


# ---------------------------------------------------------------------- client


class LLMClient:
    """The engine's ``LLM`` over HTTP, with retries and a ledger row per call."""

    def __init__(
        self, settings: LLMSettings, *, account_id: int, conversation_id: int | None
    ) -> None:
        self.settings = settings
        self.account_id = account_id
        self.conversation_id = conversation_id

    def __repr__(self) -> str:
        return f"<LLMClient {self.settings.format} {self.settings.model}@{self.settings.host}>"

    def complete(self, *, role: str, system: str, prompt: str, max_tokens: int) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown LLM role {role!r}; one of {sorted(ROLES)}")
        fmt = self.settings.format
        started = time.perf_counter()
        usage = _Usage()
        try:
            data = self._completion(role, *_request(self.settings, system, prompt, max_tokens))
            usage = _usage(fmt, data)
            text = _text(fmt, data)
            if text is None:
                raise LLMError(f"{self._where(role)}: the reply has no {fmt} message shape")
        finally:
            self._record(role, usage, (time.perf_counter() - started) * 1000)
        return text

    def _completion(
        self, role: str, url: str, headers: dict[str, str], body: dict[str, Any]
    ) -> dict[str, Any]:
        """``_post``, adapted to a model that refuses a parameter (OpenAI's
        reasoning models: ``max_completion_tokens`` for ``max_tokens``, no
        temperature). What a model refused is remembered for the process."""
        model = (self.settings.base_url, self.settings.model)
        for _ in range(len(_ADAPTABLE)):
            known = _REFUSED.get(model, frozenset())
            try:
                return self._post(role, url, headers, _adapted(body, known))
            except LLMError as exc:
                refused = _refused_params(exc) if self.settings.format == "openai" else set()
                if exc.status != 400 or not refused - known:
                    raise
                _REFUSED[model] = known | refused
                log.info("%s refuses %s: sent without", self._where(role), sorted(refused))
        return self._post(role, url, headers, _adapted(body, _REFUSED[model]))

    def _where(self, role: str) -> str:
        return f"{role} call to {self.settings.model} at {self.settings.host}"

    def _post(
        self, role: str, url: str, headers: dict[str, str], body: dict[str, Any]
    ) -> dict[str, Any]:
        s = self.settings
        client = _http_client(s.base_url)
        for attempt in range(s.max_retries + 1):
            last = attempt == s.max_retries
            try:
                response = client.post(url, json=body, headers=headers, timeout=s.timeout)
            except _RETRY_ERRORS as exc:
                if last:
                    raise LLMError(
                        f"{self._where(role)} failed after {attempt + 1} attempts: "
                        f"{type(exc).__name__}"
                    ) from exc
                problem, delay = type(exc).__name__, retry_delay(None, attempt, s.backoff)
            else:
                if response.is_success:
                    return self._json(role, response)
                if last or not _retryable(response.status_code):
                    raise self._http_error(role, response, attempt + 1)
                problem = f"HTTP {response.status_code}"
                delay = retry_delay(response, attempt, s.backoff)
            log.warning(
                "%s: %s; retry %d/%d in %.2fs",
                self._where(role),
                problem,
                attempt + 1,
                s.max_retries,
                delay,
            )
            time.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _json(self, role: str, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise LLMError(f"{self._where(role)}: the reply is not a JSON object")
        return data

    def _http_error(self, role: str, response: httpx.Response, attempts: int) -> LLMError:
        detail = response.text
        try:
            error = response.json().get("error")
            message = error.get("message") if isinstance(error, dict) else error
            if isinstance(message, str) and message:
                detail = message
        except (ValueError, AttributeError):
            pass
        if self.settings.api_key:
            detail = detail.replace(self.settings.api_key, "[redacted]")
        detail = " ".join(detail.split())[:ERROR_EXCERPT]
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return LLMError(
            f"{self._where(role)} failed{tries}: HTTP {response.status_code}: {detail}",
            status=response.status_code,
        )

    def _record(self, role: str, usage: _Usage, duration_ms: float) -> None:
        s = self.settings
        try:
            price = price_lookup(s.model)
            with transaction.atomic():  # the ledger row and its rollup, or neither
                call = self._ledger_row(role, usage, duration_ms, price)
                rollups_add(requests=[], calls=[ledger_dict(call)])
        except DatabaseError:
            # The ledger is telemetry: losing a row must not lose the completion.
            log.exception("could not write the ledger row of a %s", self._where(role))
        log.debug(
            "%s: %d in (%d cached) / %d out tokens, %.0f ms",
            self._where(role),
            usage.input,
            usage.cached,
            usage.output,
            duration_ms,
        )

    def _ledger_row(self, role: str, usage: _Usage, duration_ms: float, price: Any) -> LLMCall:
        s = self.settings
        return LLMCall.objects.create(
            account_id=self.account_id,
            conversation_id=self.conversation_id,
            component=role,
            provider=s.format,
            model=s.model[:200],
            input_tokens=usage.input,
            cached_tokens=usage.cached,
            cache_write_tokens=usage.cache_write,
            output_tokens=usage.output,
            cost=call_cost(
                price,
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cached,
                cache_write_tokens=usage.cache_write,
            ),
            priced=price is not None,
            duration_ms=duration_ms,
            created_at=timezone.now(),
        )


def complete_json(
    llm: LLM, *, role: str, system: str, prompt: str, max_tokens: int
) -> dict[str, Any]:
    """The JSON object the model answered (fences, prose and think blocks removed)."""
    reply = llm.complete(role=role, system=system, prompt=prompt, max_tokens=max_tokens)
    try:
        return json_from_model_text(reply)
    except ValueError as exc:
        raise LLMError(f"{role} reply is not a JSON object: {exc}") from exc
