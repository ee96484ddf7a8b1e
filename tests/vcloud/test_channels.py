"""The configured channel layer (in-memory, or Redis when REDIS_URL is set) carries
a group message, and the live consumer checks the account."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings

from telemetry_app.events import account_group, event_broadcast


async def test_group_event_reaches_a_member_through_the_configured_layer():
    layer = get_channel_layer()
    expected = "RedisChannelLayer" if settings.REDIS_URL else "InMemoryChannelLayer"
    assert type(layer).__name__ == expected
    channel = await layer.new_channel()
    await layer.group_add(account_group(4242), channel)
    try:
        await event_broadcast(account_id=4242, event_type="request.done", payload={"n": 1})
        message = await asyncio.wait_for(layer.receive(channel), timeout=5)
        assert message == {"type": "request.done", "payload": {"n": 1}}
    finally:
        await layer.group_discard(account_group(4242), channel)


@pytest.mark.django_db(transaction=True)
async def test_live_socket_refuses_anonymous_users():
    from vcloud.asgi import application

    communicator = WebsocketCommunicator(
        application, "/ws/live/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401
