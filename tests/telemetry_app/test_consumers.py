"""The live socket, authenticated by the browser session, carries an account's own
request events and never another account's."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from proxy_app.writer import Writer
from telemetry_app.events import event_broadcast
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_memory_jobs(settings):
    settings.VC_MEMORY_JOBS = False


def _session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _socket(user) -> WebsocketCommunicator:
    from vcloud.asgi import application

    cookie = await sync_to_async(_session_cookie)(user)
    communicator = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def test_events_reach_only_their_own_accounts_sockets(account, other_account):
    alice = await _socket(account.owner)
    mallory = await _socket(other_account.owner)
    try:
        await event_broadcast(
            account_id=account.pk,
            event_type="request.started",
            payload={"request_id": "r-1", "model": "claude-sonnet-4-5"},
        )
        started = await alice.receive_json_from(timeout=5)
        assert started == {
            "type": "request.started",
            "request_id": "r-1",
            "model": "claude-sonnet-4-5",
        }

        key, _ = await asyncio.to_thread(factories.vckey_for, account)
        writer = Writer()
        writer.submit(factories.exchange_record(account, key, request_id="r-1"))
        await writer.flush()  # stores the record, then announces request.done
        done = await alice.receive_json_from(timeout=5)
        assert (done["type"], done["request_id"], done["client_tokens"]) == (
            "request.done",
            "r-1",
            3000,
        )
        assert Decimal(done["cost"]) == Decimal("0.0045")
        assert await mallory.receive_nothing(timeout=0.3)
    finally:
        await alice.disconnect()
        await mallory.disconnect()


async def test_a_socket_with_a_forged_session_is_refused(account):
    from vcloud.asgi import application

    communicator = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"cookie", b"sessionid=not-a-session")],
    )
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401
