"""Celery tasks of the memory: each carries the name of the service it runs.

With ``REDIS_URL`` these run on ``make worker``; embedded mode does not go
through Celery at all (``services.jobs.job_dispatch`` runs the service on a
background thread of the process), so eager Celery never runs ORM code on an
event loop.
"""

from __future__ import annotations

from celery import shared_task

from memory_app.errors import LockTimeout
from memory_app.services import pipeline


@shared_task(
    bind=True,
    name="memory_app.conversation_process",
    acks_late=True,
    max_retries=5,
)
def conversation_process(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    try:
        pipeline.conversation_process(job_id=job_id)
    except LockTimeout as exc:
        raise self.retry(exc=exc, countdown=2) from exc
