"""Running ORM code from the proxy's event loop.

``db_call`` runs a sync function in a small dedicated thread pool (never on the
loop), refreshing stale connections first, so a database restart costs one
failed call rather than a broken worker.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from django.db import close_old_connections

P = ParamSpec("P")
T = TypeVar("T")

_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="vc-db")


def _fresh(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    close_old_connections()
    return fn(*args, **kwargs)


async def db_call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, functools.partial(_fresh, fn, *args, **kwargs))
