"""Planning a request against the stored memory: the hard threshold's wait."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from memory_app.models import (
    Conversation,
    JobState,
    MemoryJob,
    Segment,
    Tag,
    TagSummary,
    Turn,
)
from memory_app.services.planning import (
    _state_key,
    _with_state,
    conversation_index,
    payload_plan_for_request,
)
from proxy_app.formats import ADAPTERS
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = "the kitchen renovation needs new oak cabinets and a deeper sink " * 8


def _long_conversation(account, turns: int = 24):
    conversation = factories.conversation_create(account, turns=0)
    for i in range(turns):
        factories.turn_create(conversation, position=i, text=f"{i} {WORDS}")
    conversation.watermark = 2  # a little compacted, most of it still verbatim
    conversation.save()
    return conversation


def _exchange(turns: int):
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} {WORDS}"}
        for i in range(turns)
    ]
    messages.append({"role": "user", "content": "what about the sink?"})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": messages}
    return ADAPTERS["anthropic"].parse_request(body)


def _plan(account, conversation, turns: int):
    return payload_plan_for_request(
        account_id=account.pk,
        conversation_id=conversation.pk,
        exchange=_exchange(turns),
        ceiling=2_000,
        cache_aware=True,
    )


def _finish_later(job_id: int, delay: float) -> threading.Thread:
    def finish() -> None:
        time.sleep(delay)
        MemoryJob.objects.filter(pk=job_id).update(state=JobState.DONE, finished_at=timezone.now())
        connection.close()

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_over_the_hard_threshold_a_request_waits_for_the_running_job(account) -> None:
    conversation = _long_conversation(account)
    job = MemoryJob.objects.create(conversation=conversation, kind="process", state="running")
    # long enough for the planner to reach its wait on a loaded machine
    finisher = _finish_later(job.pk, 3.0)
    plan = _plan(account, conversation, 24)
    finisher.join()
    assert plan is not None
    assert plan.reasons[0].startswith("over the hard threshold: waited")
    assert plan.reasons[0].endswith("(done)")


def test_the_wait_is_bounded(account, settings) -> None:
    settings.VC_HARD_WAIT_SECONDS = 0.3
    conversation = _long_conversation(account)
    MemoryJob.objects.create(conversation=conversation, kind="process", state="running")
    plan = _plan(account, conversation, 24)
    assert plan is not None
    assert plan.reasons[0].endswith("(still running)")


def test_no_wait_without_work_under_way_or_under_the_threshold(account) -> None:
    conversation = _long_conversation(account)
    plan = _plan(account, conversation, 24)
    assert plan is not None
    assert not any("hard threshold" in reason for reason in plan.reasons)
    MemoryJob.objects.create(conversation=conversation, kind="process", state="pending")
    small = _plan(account, conversation, 3)  # the window is far under the ceiling
    assert small is not None
    assert not any("hard threshold" in reason for reason in small.reasons)


def test_the_index_is_reused_until_the_memory_changes(account) -> None:
    conversation = _long_conversation(account)
    tag = Tag.objects.create(conversation=conversation, name="kitchen")
    summary = TagSummary.objects.create(conversation=conversation, tag=tag, summary="oak")

    def index():
        fresh = _with_state(Conversation.objects.all()).get(pk=conversation.pk)
        return conversation_index(fresh, state=_state_key(fresh))

    def rewrite_summary() -> None:
        summary.summary = "oak cabinets"
        summary.save()  # updated_at moves

    changes = [
        lambda: Turn.objects.filter(conversation=conversation, position=3).update(tagged=True),
        lambda: factories.turn_create(conversation, position=24, text="a new turn"),
        lambda: Segment.objects.create(
            conversation=conversation, start_position=0, end_position=1, summary="s"
        ),
        rewrite_summary,
        lambda: Conversation.objects.filter(pk=conversation.pk).update(watermark=4),
    ]
    seen = index()
    assert index() is seen  # nothing changed: the cached index
    for change in changes:
        change()
        rebuilt = index()
        assert rebuilt is not seen
        assert index() is rebuilt
        seen = rebuilt
