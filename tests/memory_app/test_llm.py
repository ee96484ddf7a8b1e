"""The internal roles' LLM client against the fake provider, a real HTTP server."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from memory_app.errors import LLMError
from memory_app.llm import (
    RETRY_AFTER_MAX,
    LLMClient,
    LLMSettings,
    complete_json,
    llm_clients_close,
    llm_settings_for,
    retry_delay,
)
from telemetry_app.models import LLMCall
from tests import factories
from tests.fakes.provider import FakeProvider, RunningFake, start_fake_provider

SECRET = "sk-llm-secret-0123456789"
JSON_REPLY = '{"tags": ["travel", "lisbon"], "facts": []}'


@pytest.fixture(scope="module")
def provider() -> Iterator[RunningFake]:
    running = start_fake_provider()
    yield running
    llm_clients_close()
    running.stop()


@pytest.fixture
def fake(provider: RunningFake) -> FakeProvider:
    provider.fake.reset()
    return provider.fake


@pytest.fixture
def conversation(account):  # type: ignore[no-untyped-def]
    return factories.conversation_create(account)


def make_client(
    base_url: str, conversation: Any, fmt: str = "openai", model: str = "gpt-4o-mini", **extra: Any
) -> LLMClient:
    settings = LLMSettings(fmt, base_url, SECRET, model, backoff=0.001, **extra)
    return LLMClient(settings, account_id=conversation.account_id, conversation_id=conversation.pk)


def ask(client: LLMClient, role: str = "tagger") -> str:
    return client.complete(
        role=role, system="Reply in JSON.", prompt="Tag this turn.", max_tokens=64
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------- wire formats


def test_openai_format_returns_the_reply_text(provider, fake, conversation) -> None:
    fake.reply_text = JSON_REPLY
    client = make_client(provider.url, conversation)

    assert ask(client) == JSON_REPLY

    (request,) = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.json["model"] == "gpt-4o-mini"
    assert request.json["messages"] == [
        {"role": "system", "content": "Reply in JSON."},
        {"role": "user", "content": "Tag this turn."},
    ]
    assert request.json["temperature"] == 0
    assert request.json["max_tokens"] == 64


def test_anthropic_format_returns_the_reply_text(provider, fake, conversation) -> None:
    fake.reply_text = JSON_REPLY
    client = make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5")

    assert ask(client, "compactor") == JSON_REPLY

    (request,) = fake.requests
    assert request.path == "/v1/messages"
    assert request.json["system"] == "Reply in JSON."
    assert request.json["messages"] == [{"role": "user", "content": "Tag this turn."}]
    assert request.json["max_tokens"] == 64
    assert request.json["temperature"] == 0


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_base_url_ending_in_v1_is_not_doubled(provider, fake, conversation, fmt) -> None:
    ask(make_client(provider.url + "/v1/", conversation, fmt))

    assert fake.requests[0].path in ("/v1/chat/completions", "/v1/messages")


def test_api_key_is_sent_in_the_format_header(provider, fake, conversation) -> None:
    ask(make_client(provider.url, conversation, "openai"))
    ask(make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5"))

    openai_request, anthropic_request = fake.requests
    assert openai_request.headers["authorization"] == f"Bearer {SECRET}"
    assert "x-api-key" not in openai_request.headers
    assert anthropic_request.headers["x-api-key"] == SECRET
    assert anthropic_request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in anthropic_request.headers


# ----------------------------------------------------------------------- ledger


def test_each_call_writes_one_priced_ledger_row(provider, fake, conversation) -> None:
    fake.reply_text = JSON_REPLY
    fake.cached_tokens = 8

    ask(make_client(provider.url, conversation, "openai", "gpt-4o-mini"), "tagger")
    ask(make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5"), "fact_extractor")

    rows = {row.provider: row for row in LLMCall.objects.all()}
    assert set(rows) == {"openai", "anthropic"}
    words = len(JSON_REPLY.split())
    for row, component, model in [
        (rows["openai"], "tagger", "gpt-4o-mini"),
        (rows["anthropic"], "fact_extractor", "claude-haiku-4-5"),
    ]:
        assert row.component == component
        assert row.model == model
        assert row.account_id == conversation.account_id
        assert row.conversation_id == conversation.pk
        assert row.input_tokens > 8  # whole prompt, cached part included
        assert row.cached_tokens == 8
        assert row.output_tokens == words
        assert row.priced is True
        assert row.cost > Decimal(0)
        assert row.duration_ms > 0
        assert row.request_id == ""


def test_anthropic_cache_tokens_count_in_the_input(provider, fake, conversation) -> None:
    fake.cached_tokens, fake.cache_creation_tokens = 30, 20

    ask(make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5"))

    row = LLMCall.objects.get()
    uncached = len(fake.requests[0].body) // 4  # the fake's usage rule
    assert (row.input_tokens, row.cached_tokens, row.cache_write_tokens) == (uncached + 50, 30, 20)


def test_unpriced_model_is_recorded_at_zero_cost(provider, fake, conversation) -> None:
    ask(make_client(provider.url, conversation, "openai", "no-such-model-1"))

    row = LLMCall.objects.get()
    assert (row.priced, row.cost) == (False, Decimal(0))
    assert row.input_tokens > 0


def test_conversation_is_optional(provider, fake, account) -> None:
    settings = LLMSettings("openai", provider.url, SECRET, "gpt-4o-mini")
    LLMClient(settings, account_id=account.pk, conversation_id=None).complete(
        role="supersession", system="", prompt="hi", max_tokens=8
    )

    row = LLMCall.objects.get()
    assert (row.conversation_id, row.component) == (None, "supersession")
    assert [m["role"] for m in fake.requests[0].json["messages"]] == ["user"]


def test_unknown_role_is_refused_before_any_request(provider, fake, conversation) -> None:
    with pytest.raises(ValueError, match="unknown LLM role"):
        ask(make_client(provider.url, conversation), "proxy_upstream")

    assert fake.requests == []
    assert not LLMCall.objects.exists()


# ---------------------------------------------------------------------- retries


def test_server_errors_are_retried_until_success(provider, fake, conversation) -> None:
    fake.reply_text = JSON_REPLY
    fake.fail_next(500, times=2)

    assert ask(make_client(provider.url, conversation)) == JSON_REPLY

    assert len(fake.requests) == 3
    row = LLMCall.objects.get()
    assert row.output_tokens == len(JSON_REPLY.split())


def test_rate_limit_is_retried(provider, fake, conversation) -> None:
    fake.fail_next(429)

    ask(make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5"))

    assert len(fake.requests) == 2
    assert LLMCall.objects.count() == 1


def test_client_error_is_not_retried(provider, fake, conversation) -> None:
    fake.fail_next(400, times=5)

    with pytest.raises(LLMError, match="HTTP 400: Fake failure 400") as caught:
        ask(make_client(provider.url, conversation))

    assert caught.value.status == 400
    assert len(fake.requests) == 1
    row = LLMCall.objects.get()  # failed calls are recorded, with zero tokens and cost
    assert (row.component, row.input_tokens, row.output_tokens, row.cost) == (
        "tagger",
        0,
        0,
        Decimal(0),
    )


def test_exhausted_retries_raise_after_one_ledger_row(provider, fake, conversation) -> None:
    fake.fail_next(503, times=10)

    with pytest.raises(LLMError, match="after 3 attempts: HTTP 503") as caught:
        ask(make_client(provider.url, conversation, max_retries=2))

    assert caught.value.status == 503
    assert len(fake.requests) == 3
    assert LLMCall.objects.count() == 1


def test_unreachable_host_raises_after_retries(conversation) -> None:
    client = make_client(f"http://127.0.0.1:{free_port()}", conversation, max_retries=2)

    with pytest.raises(LLMError, match="after 3 attempts: ConnectError") as caught:
        ask(client)

    assert caught.value.status is None
    assert LLMCall.objects.get().input_tokens == 0


def test_retry_after_is_honoured_up_to_a_cap() -> None:
    def delay(**headers: str) -> float:
        return retry_delay(httpx.Response(429, headers=headers), 0, base=0.001)

    assert delay(**{"retry-after": "2"}) == 2.0
    assert delay(**{"retry-after-ms": "150"}) == 0.15
    assert delay(**{"retry-after": "86400"}) == RETRY_AFTER_MAX
    assert delay(**{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert delay() <= 0.001


def test_backoff_grows_exponentially_with_jitter() -> None:
    delays = [retry_delay(None, attempt, base=1.0) for attempt in range(3)]

    assert 0.5 <= delays[0] <= 1.0
    assert 1.0 <= delays[1] <= 2.0
    assert 2.0 <= delays[2] <= 4.0


# ---------------------------------------------------------------------- secrecy


def test_api_key_is_in_no_ledger_row_log_record_or_error(
    provider, fake, conversation, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.fail_next(500)
    ask(make_client(provider.url, conversation, "anthropic", "claude-haiku-4-5"))
    fake.fail_next(401, body={"error": {"message": f"Invalid key {SECRET}"}})
    with pytest.raises(LLMError) as caught:
        ask(make_client(provider.url, conversation))

    assert SECRET not in str(caught.value)
    assert "[redacted]" in str(caught.value)
    assert SECRET not in repr(make_client(provider.url, conversation).settings)
    for row in LLMCall.objects.values():
        assert SECRET not in str(row)
    assert any("claude-haiku-4-5" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in str(record.args)


# --------------------------------------------------------------------- settings


OVERRIDE = {
    "format": "anthropic",
    "base_url": "http://llm.account.test/",
    "api_key": "sk-account",
    "model": "claude-haiku-4-5",
}
DEPLOYMENT = {
    "format": "openai",
    "base_url": "http://llm.deploy.test",
    "api_key": "sk-deploy",
    "model": "gpt-4o-mini",
}
UNSET = {"format": "", "base_url": "", "api_key": "", "model": ""}


def test_settings_prefer_the_account_override(account, settings) -> None:
    settings.VC_LLM = DEPLOYMENT
    account.memory_settings = {"llm": OVERRIDE}

    found = llm_settings_for(account)

    assert found == LLMSettings(
        "anthropic", "http://llm.account.test", "sk-account", OVERRIDE["model"]
    )


def test_settings_fall_back_to_the_deployment(account, settings) -> None:
    settings.VC_LLM = DEPLOYMENT
    account.memory_settings = {"llm": {**OVERRIDE, "model": ""}}  # incomplete: ignored

    found = llm_settings_for(account)

    assert found is not None
    assert (found.format, found.base_url, found.api_key, found.model) == (
        "openai",
        "http://llm.deploy.test",
        "sk-deploy",
        "gpt-4o-mini",
    )


def test_deployment_key_is_optional(account, settings) -> None:
    settings.VC_LLM = {**DEPLOYMENT, "api_key": ""}

    found = llm_settings_for(account)

    assert found is not None
    assert found.api_key == ""


@pytest.mark.parametrize(
    "override",
    [None, {}, {**OVERRIDE, "format": "gemini"}, {**OVERRIDE, "base_url": "file:///etc"}],
)
def test_settings_are_none_when_nothing_usable_is_configured(account, settings, override) -> None:
    settings.VC_LLM = UNSET
    account.memory_settings = {"llm": override} if override is not None else {}

    assert llm_settings_for(account) is None


# -------------------------------------------------------------------- JSON replies


@pytest.mark.parametrize(
    "reply",
    [
        JSON_REPLY,
        f"```json\n{JSON_REPLY}\n```",
        f"<think>The user wants tags. {{maybe}}</think>\nHere you go: {JSON_REPLY}",
    ],
)
def test_complete_json_reads_the_object_in_the_reply(provider, fake, conversation, reply) -> None:
    fake.reply_text = reply
    client = make_client(provider.url, conversation)

    data = complete_json(client, role="tagger", system="JSON only.", prompt="Tag.", max_tokens=64)

    assert data == {"tags": ["travel", "lisbon"], "facts": []}


def test_complete_json_raises_on_a_reply_without_an_object(provider, fake, conversation) -> None:
    fake.reply_text = "Sorry, I cannot help with that."
    client = make_client(provider.url, conversation)

    with pytest.raises(LLMError, match="tagger reply is not a JSON object"):
        complete_json(client, role="tagger", system="JSON only.", prompt="Tag.", max_tokens=64)

    assert LLMCall.objects.count() == 1


def test_a_reasoning_model_gets_max_completion_tokens_and_no_temperature(
    provider, fake, conversation
) -> None:
    client = make_client(provider.url, conversation, model="gpt-5-mini")
    fake.reply_text = JSON_REPLY
    assert ask(client) == JSON_REPLY
    # refused max_tokens, then temperature 0, then answered
    sent = [r.json for r in fake.requests]
    assert [("max_tokens" in b, "temperature" in b) for b in sent] == [
        (True, True),
        (False, True),
        (False, False),
    ]
    assert sent[-1]["max_completion_tokens"] == 64
    fake.requests.clear()
    assert ask(client) == JSON_REPLY  # remembered: one request from now on
    assert len(fake.requests) == 1
    assert "max_tokens" not in fake.requests[0].json
    assert LLMCall.objects.filter(conversation=conversation).count() == 2


def test_a_model_taking_the_usual_parameters_keeps_them(provider, fake, conversation) -> None:
    client = make_client(provider.url, conversation, model="gpt-4o-mini")
    ask(client)
    assert fake.requests[-1].json["max_tokens"] == 64
    assert fake.requests[-1].json["temperature"] == 0
