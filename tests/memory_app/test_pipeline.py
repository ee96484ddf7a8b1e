"""The memory job on the real database: tagging, compaction, tag summaries,
idempotence, edits below the watermark, and the job counter."""

from __future__ import annotations

import hashlib

import pytest

from memory_app.config import config_for
from memory_app.models import JobState, MemoryJob, Segment, Tag, TagSummary, Turn, TurnTag
from memory_app.services import compaction, jobs, pipeline
from tests import factories
from tests.memory_app.corpus import conversation_texts

pytestmark = pytest.mark.django_db


def _conversation(account, texts):
    conversation = factories.conversation_create(account)
    for position, (role, text) in enumerate(texts):
        Turn.objects.create(
            conversation=conversation,
            position=position,
            role=role,
            content={"role": role, "content": text},
            text=text,
            content_hash=hashlib.sha256(f"{position}{text}".encode()).hexdigest(),
        )
    return conversation


def _run(conversation) -> MemoryJob:
    job = MemoryJob.objects.create(conversation=conversation, kind=jobs.PROCESS)
    pipeline.conversation_process(job_id=job.pk)
    job.refresh_from_db()
    return job


@pytest.fixture
def small_ceiling(account):
    account.context_ceiling = 2_000
    account.save()
    return account


def test_a_long_conversation_is_tagged_compacted_and_summarised(small_ceiling):
    conversation = _conversation(small_ceiling, conversation_texts(rounds=3))
    job = _run(conversation)

    assert job.state == JobState.DONE
    assert job.progress == job.total == 72
    assert not Turn.objects.filter(conversation=conversation, tagged=False).exists()
    assert Turn.objects.filter(conversation=conversation, token_count=0).count() == 0
    assert TurnTag.objects.filter(turn__conversation=conversation).count() >= 72
    conversation.refresh_from_db()
    segments = list(Segment.objects.filter(conversation=conversation).order_by("start_position"))
    assert segments, "the window was far over the soft threshold"
    # Segments tile the compacted range without gaps or overlaps, up to the watermark.
    assert segments[0].start_position == 0
    for left, right in zip(segments, segments[1:], strict=False):
        assert right.start_position == left.end_position + 1
    assert segments[-1].end_position + 1 == conversation.watermark
    # The protected recent turns and the target fill stay verbatim.
    assert conversation.watermark <= 72 - config_for({}).protected_turns
    window = sum(
        Turn.objects.filter(
            conversation=conversation, position__gte=conversation.watermark
        ).values_list("token_count", flat=True)
    )
    assert window < 0.70 * 2_000
    assert all(s.summary and s.summary_tokens < s.tokens for s in segments)
    assert all(s.tags.exists() for s in segments)
    # Tag summaries cover every segment.
    summarised = set(
        TagSummary.objects.filter(conversation=conversation).values_list("tag", flat=True)
    )
    for segment in segments:
        assert summarised & set(segment.tags.values_list("pk", flat=True))


def test_numbers_and_names_survive_into_summaries(small_ceiling):
    conversation = _conversation(small_ceiling, conversation_texts(rounds=3))
    _run(conversation)
    text = " ".join(
        Segment.objects.filter(conversation=conversation).values_list("summary", flat=True)
    )
    assert "$14,500" in text or "14,500" in text
    assert "Kyoto" in text


def test_running_the_job_again_changes_nothing(small_ceiling):
    conversation = _conversation(small_ceiling, conversation_texts(rounds=3))
    _run(conversation)
    before = (
        list(Segment.objects.filter(conversation=conversation).values_list("pk", "summary")),
        list(TagSummary.objects.filter(conversation=conversation).values_list("pk", "summary")),
        TurnTag.objects.filter(turn__conversation=conversation).count(),
    )
    _run(conversation)
    after = (
        list(Segment.objects.filter(conversation=conversation).values_list("pk", "summary")),
        list(TagSummary.objects.filter(conversation=conversation).values_list("pk", "summary")),
        TurnTag.objects.filter(turn__conversation=conversation).count(),
    )
    assert after == before


def test_an_edit_below_the_watermark_rebuilds_the_segments_from_there(small_ceiling):
    conversation = _conversation(small_ceiling, conversation_texts(rounds=3))
    _run(conversation)
    conversation.refresh_from_db()
    old_watermark = conversation.watermark
    edited = 5
    Turn.objects.filter(conversation=conversation, position__gte=edited).update(replaced=True)
    texts = conversation_texts(rounds=3)
    for position in range(edited, len(texts)):
        role, text = texts[position]
        text = text.replace("$14,500", "$16,000")
        Turn.objects.create(
            conversation=conversation,
            position=position,
            role=role,
            content={"role": role, "content": text},
            text=text,
            content_hash=f"edit-{position}",
        )
    _run(conversation)
    conversation.refresh_from_db()
    assert conversation.watermark == old_watermark or conversation.watermark > edited
    first = Segment.objects.filter(conversation=conversation).order_by("start_position").first()
    assert first.start_position == 0
    covered = " ".join(
        Segment.objects.filter(conversation=conversation).values_list("full_text", flat=True)
    )
    assert "$16,000" in covered


def test_a_short_conversation_is_tagged_but_not_compacted(account):
    conversation = _conversation(account, conversation_texts(rounds=1)[:8])
    _run(conversation)
    conversation.refresh_from_db()
    assert conversation.watermark == 0
    assert not Segment.objects.filter(conversation=conversation).exists()
    assert Tag.objects.filter(conversation=conversation).exists()


def test_enqueueing_keeps_one_pending_job_per_conversation(
    account, settings, django_capture_on_commit_callbacks
):
    conversation = _conversation(account, conversation_texts(rounds=1)[:4])
    settings.CELERY_TASK_ALWAYS_EAGER = False  # keep the job pending: no dispatch here
    with django_capture_on_commit_callbacks(execute=False):
        first = jobs.jobs_enqueue(conversation_ids=[conversation.pk, conversation.pk])
        second = jobs.jobs_enqueue(conversation_ids=[conversation.pk])
    assert len(first) == 1
    assert second == []
    assert jobs.pending_jobs(conversation.pk) == 1


def test_segments_invalidate_does_nothing_without_edits(small_ceiling):
    conversation = _conversation(small_ceiling, conversation_texts(rounds=3))
    _run(conversation)
    conversation.refresh_from_db()
    assert compaction.segments_invalidate(conversation=conversation) == 0
