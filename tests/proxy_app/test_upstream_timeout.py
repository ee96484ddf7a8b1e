"""An upstream that answers its headers and then goes silent: the proxy gives
up after ``VC_UPSTREAM_READ_TIMEOUT`` and says so with a 504 in the caller's
own error shape (not a 502: the provider was reached, it was slow)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from telemetry_app.models import RequestLog
from tests.fakes.provider import FakeProvider, RunningFake
from tests.proxy_app.conftest import ANTHROPIC_SECRET, ProxyKey, proxy_server_start
from tests.support.server import Server

pytestmark = pytest.mark.usefixtures("orm")


@pytest.fixture(scope="module")
def impatient_server(
    django_db_setup: Any, django_db_blocker: Any, fake_provider: RunningFake, tmp_path_factory: Any
) -> Iterator[Server]:
    """A second server on the same database whose upstream read timeout is 1 s."""
    server = proxy_server_start(
        django_db_blocker,
        fake_provider,
        tmp_path_factory.mktemp("impatient-server"),
        VC_UPSTREAM_READ_TIMEOUT="1",
    )
    yield server
    server.stop()


def test_a_reply_body_that_never_comes_is_a_504_in_the_callers_shape(
    impatient_server: Server, proxy_key: ProxyKey, fake: FakeProvider
) -> None:
    client = anthropic.Anthropic(
        api_key=ANTHROPIC_SECRET,
        base_url=f"{impatient_server.url}/v/{proxy_key.raw}",
        max_retries=0,
        default_headers={"x-fake-delay": "3"},  # headers at once, the body 3 s later
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 504
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert "in time" in caught.value.body["error"]["message"]  # type: ignore[index]
    assert fake.requests[-1].path == "/v1/messages"  # the provider was reached
    log = _logged(proxy_key)
    assert (log.status, log.error) == (504, "upstream body timed out")


def _logged(proxy_key: ProxyKey) -> RequestLog:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = RequestLog.objects.filter(account=proxy_key.account).order_by("-pk").first()
        if row is not None:
            return row
        time.sleep(0.1)
    raise AssertionError("the request was not logged")
