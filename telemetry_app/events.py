"""Live events to an account's dashboard group over the channel layer."""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def account_group(account_id: int) -> str:
    return f"account-{account_id}"


async def event_broadcast(*, account_id: int, event_type: str, payload: dict[str, Any]) -> None:
    """Send one event to the account's group; a failing layer never fails the caller."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(account_group(account_id), {"type": event_type, "payload": payload})
    except Exception:
        log.exception("live event %s for account %s not delivered", event_type, account_id)
