"""The dashboard's websocket: one per page, subscribed to its account's group."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from telemetry_app.events import account_group


@database_sync_to_async
def _account_id(user: Any) -> int | None:
    from vcloud.accounts.services import account_for_user

    return account_for_user(user).pk


class LiveConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        account_id = await _account_id(user)
        self.group = account_group(account_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def request_started(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "request.started", **event["payload"]})

    async def request_done(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "request.done", **event["payload"]})
