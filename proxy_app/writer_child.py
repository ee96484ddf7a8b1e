"""The writer process's entry point (``proxy_app.writer.ProcessSink``).

A spawned child imports its target's module before anything else runs, so this
module must not import models at import time: it sets Django up on the
parent's database first, then imports the writer.
"""

from __future__ import annotations

from typing import Any

BATCH_MAX = 2000


def writer_process_main(
    queue: Any, database: dict[str, Any], overrides: dict[str, Any] | None = None
) -> None:
    """Write batches from ``queue`` until ``None`` arrives. ``overrides`` are
    the parent's values of settings the child must share."""
    import django
    from django.conf import settings

    settings.DATABASES["default"].update(database)
    for name, value in (overrides or {}).items():
        setattr(settings, name, value)
    django.setup()
    from memory_app.services.jobs import jobs_recover

    if settings.CELERY_TASK_ALWAYS_EAGER and settings.VC_MEMORY_JOBS:
        jobs_recover(stale_running=True)  # embedded: this process is the only runner
    _write_until_stopped(queue)
    _exit_without_waiting_for_jobs()


def _write_until_stopped(queue: Any) -> None:
    from proxy_app.writer import RETRIES, records_persist_reliably

    while True:
        batch = queue.get()
        if batch is None:
            return
        # Take whatever else is already queued: fewer, larger transactions.
        while len(batch) < BATCH_MAX and not queue.empty():
            more = queue.get()
            if more is None:
                records_persist_reliably(batch, RETRIES)
                return
            batch.extend(more)
        records_persist_reliably(batch, RETRIES)


def _exit_without_waiting_for_jobs() -> None:
    """Memory jobs may be mid-way: each step commits on its own and the job is
    picked up again at the next start, so the server need not wait for it."""
    import logging
    import os

    from django.db import connections

    from memory_app.services.jobs import jobs_shutdown

    jobs_shutdown()
    connections.close_all()
    logging.shutdown()
    os._exit(0)
