"""The turn-completion job: everything the memory does after new turns land.

``conversation_process`` runs under the conversation's lock, in order: undo
compaction that the client's edits invalidated, tag/date/embed the new turns,
split tags that cover too much, compact while the verbatim window is above the
soft threshold, and rebuild the tag summaries that new segments made stale.
Each step is idempotent, so a retried or duplicated job changes nothing more.
"""

from __future__ import annotations

import logging

from memory_app.config import config_for
from memory_app.locks import conversation_lock
from memory_app.models import JobState, MemoryJob
from memory_app.services import compaction, jobs, tagging

log = logging.getLogger(__name__)


def conversation_process(*, job_id: int) -> None:
    job = MemoryJob.objects.select_related("conversation__account").get(pk=job_id)
    if job.state == JobState.DONE:
        return
    conversation = job.conversation
    with conversation_lock(conversation.pk):
        job.refresh_from_db()
        if job.state == JobState.DONE:
            return
        jobs.job_start(job)
        try:
            _steps(job)
        except Exception as exc:
            log.exception("memory job %s of conversation %s failed", job.pk, conversation.pk)
            jobs.job_finish(job, error=f"{type(exc).__name__}: {exc}")
            raise
        jobs.job_finish(job)


def _steps(job: MemoryJob) -> None:
    conversation = job.conversation
    account = conversation.account
    config = config_for(account.memory_settings)
    progress = jobs.job_progress(job)
    compaction.segments_invalidate(conversation=conversation)
    tagged = tagging.turns_tag(conversation=conversation, config=config, progress=progress)
    if tagged:
        tagging.tags_split(conversation=conversation, config=config, new_turns=tagged)
    compaction.conversation_compact(
        conversation=conversation, config=config, ceiling=account.context_ceiling
    )
    compaction.tag_summaries_refresh(conversation=conversation, config=config)
