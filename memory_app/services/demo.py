"""``vc demo``: the demo conversation, replayed through a running vcloud.

``demo_run`` checks that a vcloud answers at ``url``, starts the simulated
provider (``proxy_app.simulator``) in this process, points the demo account's
Anthropic upstream at it and sets its ceiling, creates a key, and replays
``memory_app.demo`` through the proxy with the official ``anthropic`` SDK the
way a chat client does: the whole history every time, the simulator's replies
as the assistant turns, one ``X-VC-Session`` per run, a streamed request every
third time. ``turns`` counts both sides (``turns`` = 300 is 150 requests).
When the replay ends (or fails) the account's upstream is put back and the key
is revoked: the simulator lives only as long as the command.

The server must use the same database as this process (it resolves the key
this process created).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.utils import timezone

from memory_app.demo import demo_messages
from memory_app.errors import DemoError
from memory_app.models import Conversation
from memory_app.services.jobs import pending_jobs
from proxy_app.simulator import MODEL, Simulator
from vcloud.accounts.models import Account
from vcloud.accounts.services import account_for_user, vckey_create, vckey_revoke

SYSTEM = "You are a helpful personal assistant. Keep answers short and concrete."
CLIENT_KEY = "sk-demo-simulated"  # passes through to the simulator, which accepts anything


@dataclass
class DemoAccount:
    account: Account
    username: str
    password: str | None  # set when this run created the user
    previous_upstream: str


@dataclass
class DemoResult:
    username: str
    password: str | None
    session: str
    conversation_id: int | None
    requests: int
    served: int  # requests the simulator answered
    seconds: float


def demo_run(
    *,
    url: str,
    username: str,
    password: str | None,
    turns: int,
    delay: float,
    ceiling: int,
    on_request: Callable[[int, int], None] | None = None,
) -> DemoResult:
    url = url.rstrip("/")
    demo_server_check(url=url)
    started = time.monotonic()
    simulator = Simulator(latency=0.05 if delay else 0.0).start()
    try:
        demo = demo_account_prepare(
            username=username, password=password, upstream=simulator.url, ceiling=ceiling
        )
        key, raw = vckey_create(account=demo.account, name="demo")
        session = f"demo-{timezone.now():%Y%m%d-%H%M%S}"
        try:
            requests = demo_replay(
                url=url,
                raw_key=raw,
                session=session,
                turns=turns,
                delay=delay,
                on_request=on_request,
            )
        finally:
            vckey_revoke(key=key)
            demo_account_restore(demo=demo)
    finally:
        simulator.stop()
    conversation = Conversation.objects.filter(account=demo.account, session_id=session).first()
    return DemoResult(
        username=demo.username,
        password=demo.password,
        session=session,
        conversation_id=conversation.pk if conversation else None,
        requests=requests,
        served=simulator.served,
        seconds=time.monotonic() - started,
    )


def demo_server_check(*, url: str) -> None:
    try:
        httpx.get(f"{url.rstrip('/')}/", timeout=5)
    except httpx.HTTPError as exc:
        raise DemoError(
            f"no vcloud answers at {url} ({exc.__class__.__name__}); "
            "start it with `make run` in another terminal, then run the demo again"
        ) from exc


def demo_account_prepare(
    *, username: str, password: str | None, upstream: str, ceiling: int
) -> DemoAccount:
    """The demo user's account (the user is created when missing), its Anthropic
    upstream pointed at ``upstream`` and its ceiling set. Saving the account
    also tells the running proxy to drop the account's cached key settings."""
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    created_password = None
    if user is None:
        created_password = password or secrets.token_urlsafe(12)
        user = User.objects.create_user(username, password=created_password)
    account = account_for_user(user)
    previous = account.upstream_anthropic
    account.upstream_anthropic = upstream
    account.context_ceiling = ceiling
    account.save(update_fields=["upstream_anthropic", "context_ceiling", "updated_at"])
    return DemoAccount(account, username, created_password, previous)


def demo_account_restore(*, demo: DemoAccount) -> None:
    """Put back the Anthropic upstream the account had before the demo."""
    account = demo.account
    account.upstream_anthropic = demo.previous_upstream
    account.save(update_fields=["upstream_anthropic", "updated_at"])


def demo_replay(
    *,
    url: str,
    raw_key: str,
    session: str,
    turns: int,
    delay: float,
    on_request: Callable[[int, int], None] | None = None,
) -> int:
    """Send the demo conversation through the proxy, one request per user turn;
    returns the number of requests sent."""
    import anthropic  # a second's import, needed only here

    client = anthropic.Anthropic(
        api_key=CLIENT_KEY,
        base_url=f"{url}/v/{raw_key}",
        default_headers={"X-VC-Session": session},
        timeout=120,
        max_retries=2,
    )
    users = demo_messages((max(turns, 1) + 1) // 2)
    history: list[dict[str, Any]] = []
    for done, text in enumerate(users, start=1):
        history.append({"role": "user", "content": text})
        try:
            reply = _ask(client, history, stream=done % 3 == 0)
        except anthropic.APIError as exc:
            raise DemoError(_explain(url, exc)) from exc
        history.append({"role": "assistant", "content": reply})
        if on_request is not None:
            on_request(done, len(users))
        if delay and done < len(users):
            time.sleep(delay)
    return len(users)


def _ask(client: Any, history: list[dict[str, Any]], *, stream: bool) -> str:
    params = {"model": MODEL, "max_tokens": 512, "system": SYSTEM, "messages": history}
    if stream:
        with client.messages.stream(**params) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**params)
    return "".join(block.text for block in message.content if block.type == "text")


def _explain(url: str, exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    if status == 401:
        return (
            f"the vcloud at {url} does not know the demo's key: does it use the same "
            "database (VC_DATA_DIR, DATABASE_URL) as this command?"
        )
    return f"a demo request failed: {exc}"


def demo_settle(*, conversation_id: int, turns: int, timeout: float) -> Conversation:
    """Wait (at most ``timeout`` seconds) until the conversation holds ``turns``
    turns and its background memory work is done; returns it either way."""
    deadline = time.monotonic() + timeout
    while True:
        conversation = Conversation.objects.get(pk=conversation_id)
        done = conversation.turn_count >= turns and not pending_jobs(conversation_id)
        if done or time.monotonic() > deadline:
            return conversation
        time.sleep(0.5)
