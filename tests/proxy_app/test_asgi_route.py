"""The provider route as an ASGI callable, driven in-process: body limits
without reading the whole body, and key revocation taking effect at once."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy_app import upstream
from proxy_app import writer as writer_module
from proxy_app.asgi import handle
from tests import factories
from vcloud.accounts.services import vckey_revoke

pytestmark = pytest.mark.django_db(transaction=True)

BODY = orjson.dumps(
    {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
)


@pytest.fixture(autouse=True)
async def _fresh_process_state(settings, fake_provider, monkeypatch):
    settings.VC_UPSTREAM = {p: fake_provider.url for p in ("anthropic", "openai", "gemini")}
    settings.VC_MAX_BODY_BYTES = 1024 * 1024
    monkeypatch.setattr(writer_module, "_writer", None)
    yield
    await writer_module.writer_flush()
    await upstream.session_close()


class Exchange:
    """One request through ``handle``: what it read and what it sent."""

    def __init__(self, path: str, chunks: list[bytes], headers: dict[str, str]) -> None:
        self.scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "query_string": b"",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        }
        self.chunks = chunks
        self.reads = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.reads >= len(self.chunks):
            await asyncio.Event().wait()  # the client keeps the connection open
        self.reads += 1
        more = self.reads < len(self.chunks)
        return {"type": "http.request", "body": self.chunks[self.reads - 1], "more_body": more}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def run(self) -> Exchange:
        await handle(self.scope, self.receive, self.send)
        return self

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def json(self) -> Any:
        return orjson.loads(b"".join(m.get("body", b"") for m in self.sent[1:]))


HEADERS = {"content-type": "application/json", "x-api-key": "sk-test"}


async def test_declared_oversized_body_gets_413_without_reading_it(account):
    _, raw = await asyncio.to_thread(factories.vckey_for, account)
    chunks = [b"x" * 65536] * 40
    ex = await Exchange(
        f"/v/{raw}/v1/messages", chunks, {**HEADERS, "content-length": str(40 * 65536)}
    ).run()
    assert ex.status == 413
    assert ex.json["error"]["type"] == "request_too_large"
    assert ex.reads == 0


async def test_chunked_oversized_body_stops_reading_at_the_limit(account):
    _, raw = await asyncio.to_thread(factories.vckey_for, account)
    ex = await Exchange(f"/v/{raw}/v1/chat/completions", [b"x" * 65536] * 40, HEADERS).run()
    assert ex.status == 413
    assert ex.json["error"]["message"].startswith("Request body is over")
    assert ex.reads == 17  # 16 chunks fill 1 MiB; the 17th crosses it


async def test_revoked_key_is_refused_on_the_next_request_and_a_new_key_works_at_once(
    account, fake_provider
):
    key, raw = await asyncio.to_thread(factories.vckey_for, account)
    ok = await Exchange(f"/v/{raw}/v1/messages", [BODY], HEADERS).run()
    assert ok.status == 200
    await asyncio.to_thread(vckey_revoke, key=key)
    refused = await Exchange(f"/v/{raw}/v1/messages", [BODY], HEADERS).run()
    assert refused.status == 401
    assert refused.json["error"]["type"] == "authentication_error"
    _, fresh = await asyncio.to_thread(factories.vckey_for, account)
    again = await Exchange(f"/v/{fresh}/v1/messages", [BODY], HEADERS).run()
    assert again.status == 200
    assert again.json["content"][0]["text"].startswith("Echo: hi")


async def test_key_from_header_or_query_without_path_prefix(account):
    _, raw = await asyncio.to_thread(factories.vckey_for, account)
    by_header = await Exchange("/v1/messages", [BODY], {**HEADERS, "x-vc-key": raw}).run()
    assert by_header.status == 200
    ex = Exchange("/v1/messages", [BODY], HEADERS)
    ex.scope["query_string"] = f"vckey={raw}".encode()
    assert (await ex.run()).status == 200
    missing = await Exchange("/v1/messages", [BODY], HEADERS).run()
    assert missing.status == 401


async def test_revocation_in_another_process_reaches_this_one_through_the_watch(account):
    from django.utils import timezone

    from proxy_app.keys import key_cache_watch
    from vcloud.accounts.models import VCKey

    key, raw = await asyncio.to_thread(factories.vckey_for, account)
    assert (await Exchange(f"/v/{raw}/v1/messages", [BODY], HEADERS).run()).status == 200
    watch = asyncio.create_task(key_cache_watch(interval=0.05))
    try:
        await asyncio.sleep(0.2)  # the watch has taken its first reading
        # As another worker would: the row changes, this process's cache is not told.
        await VCKey.objects.filter(pk=key.pk).aupdate(revoked_at=timezone.now())
        statuses = []
        for _ in range(40):
            statuses.append((await Exchange(f"/v/{raw}/v1/messages", [BODY], HEADERS).run()).status)
            if statuses[-1] == 401:
                break
            await asyncio.sleep(0.05)
        assert statuses[-1] == 401
    finally:
        watch.cancel()
