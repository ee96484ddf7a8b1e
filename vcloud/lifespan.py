"""ASGI lifespan: start and stop the process's shared resources.

Apps register coroutines with ``on_startup``/``on_shutdown`` at import time (the
proxy's HTTP client pool, its background writer, the key-cache watcher);
``lifespan`` runs them when the server starts and stops.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]
_startup: list[Hook] = []
_shutdown: list[Hook] = []


def on_startup(hook: Hook) -> Hook:
    _startup.append(hook)
    return hook


def on_shutdown(hook: Hook) -> Hook:
    _shutdown.append(hook)
    return hook


async def run_startup() -> None:
    for hook in _startup:
        await hook()


async def run_shutdown() -> None:
    for hook in reversed(_shutdown):
        try:
            await hook()
        except Exception:
            log.exception("shutdown hook %s failed", getattr(hook, "__name__", hook))


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await run_startup()
            except Exception as exc:
                log.exception("startup failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await run_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
