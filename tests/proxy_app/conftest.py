"""End-to-end fixtures: the fake provider in this process, vcloud in its own.

The vcloud server process shares pytest-django's test database (a SQLite file,
or the PostgreSQL test database), so tests drive it with the official SDKs and
then read what it stored through the ORM. Rows written here are committed (no
per-test rollback: another process must see them), so every test makes its own
account and key through ``proxy_key`` and the session ends by deleting them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from google import genai
from google.genai import types

from tests.fakes.provider import FakeProvider, RunningFake, start_fake_provider
from tests.support.server import Server, start_server, start_worker
from vcloud.accounts.models import Account
from vcloud.accounts.services import account_for_user, vckey_create


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[RunningFake]:
    running = start_fake_provider()
    yield running
    running.stop()


def proxy_server_start(
    django_db_blocker: Any, fake_provider: RunningFake, data_dir: Any, **env: str
) -> Server:
    """A server process on the test database, every provider format sent to the
    fake provider, the hashing embedder, its own Celery queue; ``env`` on top."""
    with django_db_blocker.unblock():
        url = _database_url()
    return start_server(
        data_dir,
        DATABASE_URL=url,
        VC_UPSTREAM_ANTHROPIC=fake_provider.url,
        VC_UPSTREAM_OPENAI=fake_provider.url,
        VC_UPSTREAM_GEMINI=fake_provider.url,
        VC_EMBEDDER="hashing",
        VC_CELERY_QUEUE=f"vc-test-{uuid.uuid4().hex[:12]}",
        **env,
    )


@pytest.fixture(scope="session")
def proxy_server(
    django_db_setup: Any, django_db_blocker: Any, fake_provider: RunningFake, tmp_path_factory: Any
) -> Iterator[Server]:
    server = proxy_server_start(
        django_db_blocker,
        fake_provider,
        tmp_path_factory.mktemp("proxy-server"),
        VC_FAULT_INJECTION="1",
        VC_MAX_BODY_BYTES="1048576",
    )
    # Scaled mode: background work goes through Redis to a real worker.
    worker = start_worker(server) if settings.REDIS_URL else None
    yield server
    server.stop()
    if worker is not None:
        worker.terminate()
        worker.wait(timeout=20)
    with django_db_blocker.unblock():
        get_user_model().objects.filter(username__startswith="e2e-").delete()


@pytest.fixture
def orm(django_db_blocker: Any) -> Iterator[None]:
    """ORM access without pytest-django's per-test transaction (see module docstring)."""
    with django_db_blocker.unblock():
        yield


@dataclass
class ProxyKey:
    account: Account
    raw: str
    server: Server

    @property
    def base(self) -> str:
        return f"{self.server.url}/v/{self.raw}"


_counter = iter(range(1_000_000))


@pytest.fixture
def proxy_key(proxy_server: Server, orm: None) -> ProxyKey:
    user = get_user_model().objects.create_user(f"e2e-{time.time_ns()}-{next(_counter)}")
    account = account_for_user(user)
    _, raw = vckey_create(account=account, name="e2e")
    return ProxyKey(account, raw, proxy_server)


@pytest.fixture
def other_proxy_key(proxy_server: Server, orm: None) -> ProxyKey:
    """A key of a second account, for isolation checks."""
    user = get_user_model().objects.create_user(f"e2e-other-{time.time_ns()}-{next(_counter)}")
    account = account_for_user(user)
    _, raw = vckey_create(account=account, name="e2e-other")
    return ProxyKey(account, raw, proxy_server)


def wait_for(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll until ``check()`` is truthy (the writer flushes in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


# ---------------------------------------------------------------- SDK clients (e2e)

# Provider credentials the clients send; the proxy must pass them through untouched
# and never store or log them.
ANTHROPIC_SECRET = "sk-secret-e2e-123"
OPENAI_SECRET = "sk-secret-e2e-456"
GEMINI_SECRET = "sk-secret-e2e-789"


@pytest.fixture
def fake(fake_provider: RunningFake) -> FakeProvider:
    """The fake provider, recordings cleared and knobs at their defaults."""
    fake_provider.fake.reset()
    return fake_provider.fake


@pytest.fixture
def claude(proxy_key: ProxyKey) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=ANTHROPIC_SECRET, base_url=proxy_key.base, max_retries=0)


@pytest.fixture
def gpt(proxy_key: ProxyKey) -> openai.OpenAI:
    return openai.OpenAI(api_key=OPENAI_SECRET, base_url=proxy_key.base + "/v1", max_retries=0)


@pytest.fixture
def gemini(proxy_key: ProxyKey) -> genai.Client:
    options = types.HttpOptions(base_url=proxy_key.base)
    return genai.Client(api_key=GEMINI_SECRET, http_options=options)
