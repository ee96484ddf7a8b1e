"""`vc demo` end to end: the demo conversation through a real vcloud server and
the simulated provider, read back through the ORM."""

from __future__ import annotations

import time

from memory_app.models import Conversation, RequestContext
from memory_app.services.demo import demo_run, demo_settle
from proxy_app.simulator import MODEL
from telemetry_app.models import RequestLog
from tests.proxy_app.conftest import wait_for
from vcloud.accounts.models import Account, VCKey


def test_demo_replays_the_conversation_through_the_proxy(proxy_server, orm):
    username = f"e2e-demo-{time.time_ns()}"
    progress: list[tuple[int, int]] = []
    result = demo_run(
        url=proxy_server.url,
        username=username,
        password=None,
        turns=24,
        delay=0,
        ceiling=700,
        on_request=lambda done, total: progress.append((done, total)),
    )
    assert result.requests == 12
    assert result.served == 12  # every request reached the simulator
    assert progress[-1] == (12, 12)
    assert result.password  # the user was created, with a generated password

    conversation = demo_settle(conversation_id=result.conversation_id, turns=24, timeout=30)
    assert conversation.session_id == result.session
    assert conversation.turn_count == 24
    assert conversation.turns.filter(text__startswith="[2026/09/01").exists()
    rows = wait_for(lambda: list(RequestLog.objects.filter(conversation=conversation)))
    assert len(rows) == 12
    assert {row.status for row in rows} == {200}
    assert {row.model for row in rows} == {MODEL}
    assert {row.stream for row in rows} == {True, False}
    # The ceiling is low enough that later requests were planned from memory.
    assert RequestContext.objects.filter(conversation=conversation, planned=True).exists()

    account = Account.objects.get(owner__username=username)
    assert account.context_ceiling == 700
    assert account.upstream_anthropic == ""  # the simulator is gone: put back
    assert not VCKey.objects.filter(account=account, revoked_at__isnull=True).exists()
    assert Conversation.objects.filter(account=account).count() == 1
