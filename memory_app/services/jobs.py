"""Background jobs of a conversation: enqueue once, run under the lock, count.

A conversation gets at most one *pending* job of a kind: the job reads the
latest state when it runs, so requests arriving meanwhile need no job of their
own. ``pending_jobs`` counts pending and running jobs (the API shows it; 0 means
all background work for the conversation is done). Embedded mode (eager
Celery) runs jobs on one background thread of the process that enqueued them;
with ``REDIS_URL`` they go to Celery workers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from memory_app.errors import LockTimeout
from memory_app.models import Conversation, JobState, MemoryJob

log = logging.getLogger(__name__)

PROCESS = "process"
ACTIVE = (JobState.PENDING, JobState.RUNNING)
STALE_RUNNING = timedelta(minutes=15)

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def jobs_enqueue(*, conversation_ids: Iterable[int], kind: str = PROCESS) -> list[int]:
    """Create a pending job per conversation unless one is already pending."""
    ids = sorted(set(conversation_ids))
    busy = set(
        MemoryJob.objects.filter(
            conversation_id__in=ids, kind=kind, state=JobState.PENDING
        ).values_list("conversation_id", flat=True)
    )
    existing = set(Conversation.objects.filter(pk__in=ids).values_list("pk", flat=True))
    jobs = [
        MemoryJob.objects.create(conversation_id=cid, kind=kind)
        for cid in ids
        if cid in existing and cid not in busy
    ]
    for job in jobs:
        transaction.on_commit(lambda job_id=job.pk: job_dispatch(job_id))
    return [job.pk for job in jobs]


def job_dispatch(job_id: int) -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        _local_executor().submit(_run_local, job_id)
    else:
        from memory_app.tasks import conversation_process

        conversation_process.delay(job_id)


def _local_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vc-memory")
        return _executor


def _run_local(job_id: int, attempts: int = 3) -> None:
    from memory_app.services.pipeline import conversation_process

    for attempt in range(1, attempts + 1):
        close_old_connections()
        try:
            conversation_process(job_id=job_id)
            return
        except LockTimeout:
            log.warning("job %s: conversation locked (attempt %d)", job_id, attempt)
        except Exception:
            log.exception("job %s failed (attempt %d)", job_id, attempt)
        finally:
            close_old_connections()


def jobs_wait_local(timeout: float = 60.0) -> bool:
    """Block until the local executor has run what was queued (tests, CLI)."""
    if _executor is None:
        return True
    done = _executor.submit(lambda: None)
    try:
        done.result(timeout=timeout)
        return True
    except TimeoutError:
        return False


def job_start(job: MemoryJob, *, total: int = 0) -> None:
    job.state = JobState.RUNNING
    job.attempts += 1
    job.started_at = timezone.now()
    job.total = total
    job.error = ""
    job.save(update_fields=["state", "attempts", "started_at", "total", "error"])


def job_progress(job: MemoryJob) -> Callable[..., None]:
    """A callback that adds to the job's progress (and total when it grows)."""

    def advance(done: int, total: int | None = None) -> None:
        job.progress += done
        if total is not None:
            job.total = total
        MemoryJob.objects.filter(pk=job.pk).update(progress=job.progress, total=job.total)

    return advance


def job_finish(job: MemoryJob, *, error: str = "") -> None:
    job.state = JobState.FAILED if error else JobState.DONE
    job.error = error[:2000]
    job.finished_at = timezone.now()
    job.save(update_fields=["state", "error", "finished_at"])


def pending_jobs(conversation_id: int) -> int:
    return MemoryJob.objects.filter(conversation_id=conversation_id, state__in=ACTIVE).count()


def jobs_shutdown() -> None:
    """Drop queued local jobs (they stay pending in the database)."""
    if _executor is not None:
        _executor.shutdown(wait=False, cancel_futures=True)


def jobs_recover(*, stale_running: bool = False) -> int:
    """Re-dispatch jobs a stopped process left behind (pending, or running for
    longer than a job can take — or any running job when ``stale_running``,
    i.e. the caller is the only runner); returns how many."""
    running = MemoryJob.objects.filter(state=JobState.RUNNING)
    if not stale_running:
        running = running.filter(started_at__lt=timezone.now() - STALE_RUNNING)
    running.update(state=JobState.PENDING)
    ids = list(MemoryJob.objects.filter(state=JobState.PENDING).values_list("pk", flat=True))
    for job_id in ids:
        job_dispatch(job_id)
    return len(ids)
