"""Compaction: segments and their summaries, the watermark, tag summaries.

``conversation_compact`` asks the engine whether the verbatim window (turns at
or past the watermark) is over the soft threshold of the account's ceiling;
if so it groups the turns to compact into segments, summarises each, stores
them with their tags, session date and embedding, and moves the watermark past
them, in one transaction per step. Turns are never deleted. Running it again
with nothing new changes nothing.

``segments_invalidate`` undoes compaction the client's edits made stale: when
an edited (new, untagged) turn sits below the watermark, the segments from
that point on are dropped and the watermark goes back to where they began.

``tag_summaries_refresh`` picks, by greedy set cover, the tags that cover every
segment and rebuilds the summary of each one whose segments grew.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from django.db import transaction

from memory_app import selectors
from memory_app.config import MemoryConfig
from memory_app.embedding import embedder
from memory_app.engine import tokens
from memory_app.engine.compaction import compaction_plan
from memory_app.engine.segmenter import segments_plan
from memory_app.engine.setcover import summaries_to_rebuild, tag_cover
from memory_app.engine.summariser import ExtractiveSummariser, LLMSummariser, summary_budget
from memory_app.engine.types import SegmentPlan, TurnView
from memory_app.engine.vectors import vector_from_bytes, vector_to_bytes
from memory_app.models import Conversation, Segment, SegmentTag, Tag, TagSummary, Turn

log = logging.getLogger(__name__)

MAX_ROUNDS = 20  # compaction rounds per job (each round is one large step)


def _count(text: str) -> int:
    return tokens.count_text(text)


def summariser_for(conversation: Conversation) -> Any:
    from memory_app.llm import LLMClient, llm_settings_for

    settings = llm_settings_for(conversation.account)
    if settings is None:
        return ExtractiveSummariser()
    client = LLMClient(
        settings, account_id=conversation.account_id, conversation_id=conversation.pk
    )
    return LLMSummariser(client)


def conversation_compact(
    *, conversation: Conversation, config: MemoryConfig, ceiling: int, fixed_tokens: int = 0
) -> int:
    """Compact while the window is over the soft threshold; returns segments made."""
    settings = config.compaction(ceiling)
    summariser = summariser_for(conversation)
    made = 0
    for _ in range(MAX_ROUNDS):
        # Only the verbatim window matters to the plan: never load the whole history.
        turns = selectors.active_turns(conversation, from_position=conversation.watermark)
        views = selectors.turn_views(conversation, turns)
        plan = compaction_plan(views, conversation.watermark, settings, fixed_tokens)
        if not plan.positions:
            break
        wanted = set(plan.positions)
        chosen = [t for t in turns if t.position in wanted]
        chosen_views = [v for v in views if v.position in wanted]
        segments = segments_plan(chosen_views, settings, _embeddings(chosen))
        _segments_store(
            conversation, segments, chosen_views, summariser, settings, plan.end_position
        )
        made += len(segments)
    return made


def _embeddings(turns: list[Turn]) -> Any:
    model = embedder()
    if not turns or any(
        t.embedding is None or t.embedding_model != model.model_name for t in turns
    ):
        return None
    return np.vstack([vector_from_bytes(bytes(t.embedding), model.dimensions) for t in turns])


@transaction.atomic
def _segments_store(
    conversation: Conversation,
    plans: list[SegmentPlan],
    views: list[TurnView],
    summariser: Any,
    settings: Any,
    watermark: int,
) -> None:
    by_position = {v.position: v for v in views}
    summaries = []
    for plan in plans:
        members = [by_position[p] for p in plan.positions]
        budget = summary_budget(plan.tokens, settings)
        summaries.append(summariser.summarise(plan, members, budget, _count))
    model = embedder()
    vectors = model.encode([s.text for s in summaries]) if summaries else []
    for plan, summary, vector in zip(plans, summaries, vectors, strict=True):
        segment = Segment.objects.create(
            conversation=conversation,
            start_position=plan.start_position,
            end_position=plan.end_position,
            level=1,
            summary=summary.text,
            full_text="\n".join(
                f"{by_position[p].role}: {by_position[p].text}" for p in plan.positions
            ),
            tokens=plan.tokens,
            summary_tokens=summary.tokens,
            session_date=plan.session_date,
            embedding=vector_to_bytes(vector),
            embedding_model=model.model_name,
        )
        _segment_tags(conversation, segment, summary.tags or plan.tags)
    conversation.watermark = watermark
    Conversation.objects.filter(pk=conversation.pk).update(watermark=watermark)


def _segment_tags(conversation: Conversation, segment: Segment, names: list[str]) -> None:
    names = list(dict.fromkeys(n for n in names if n))[:12]
    existing = {t.name: t for t in Tag.objects.filter(conversation=conversation, name__in=names)}
    Tag.objects.bulk_create(
        [Tag(conversation=conversation, name=n) for n in names if n not in existing],
        ignore_conflicts=True,
    )
    tags = Tag.objects.filter(conversation=conversation, name__in=names)
    SegmentTag.objects.bulk_create(
        [SegmentTag(segment=segment, tag=t) for t in tags], ignore_conflicts=True
    )


@transaction.atomic
def segments_invalidate(*, conversation: Conversation) -> int:
    """Drop segments from the first edited turn below the watermark; returns how many."""
    edited = (
        Turn.objects.filter(
            conversation=conversation,
            replaced=False,
            tagged=False,
            position__lt=conversation.watermark,
        )
        .order_by("position")
        .values_list("position", flat=True)
        .first()
    )
    if edited is None:
        return 0
    stale = Segment.objects.filter(conversation=conversation, end_position__gte=edited)
    start = min((s.start_position for s in stale), default=edited)
    count = stale.count()
    stale.delete()
    conversation.watermark = min(start, edited)
    Conversation.objects.filter(pk=conversation.pk).update(watermark=conversation.watermark)
    TagSummary.objects.filter(conversation=conversation, covers_until__gte=edited).delete()
    return count


def tag_summaries_refresh(*, conversation: Conversation, config: MemoryConfig) -> list[str]:
    """Rebuild the summaries of covering tags whose segments grew; returns their names."""
    segments = list(
        Segment.objects.filter(conversation=conversation, level=1)
        .prefetch_related("tags")
        .order_by("start_position")
    )
    if not segments:
        return []
    tag_sets = {s.pk: {t.name for t in s.tags.all()} for s in segments}
    counts = dict(Tag.objects.filter(conversation=conversation).values_list("name", "turn_count"))
    cover = tag_cover(tag_sets, counts)
    covered = dict(
        TagSummary.objects.filter(conversation=conversation).values_list(
            "tag__name", "covers_until"
        )
    )
    ends: dict[str, int] = {}
    for segment in segments:
        for name in tag_sets[segment.pk]:
            ends[name] = max(ends.get(name, -1), segment.end_position)
    rebuild = summaries_to_rebuild(cover, covered, ends)
    summariser = summariser_for(conversation)
    for name in rebuild:
        parts = [(s.start_position, s.summary) for s in segments if name in tag_sets[s.pk]]
        summary = summariser.tag_summary(name, parts, config.tag_summary_max_tokens, _count)
        _tag_summary_store(conversation, name, summary.text, summary.tokens, ends[name])
    return rebuild


def _tag_summary_store(
    conversation: Conversation, name: str, text: str, size: int, covers_until: int
) -> None:
    model = embedder()
    vector = model.encode([text])[0]
    tag = Tag.objects.get(conversation=conversation, name=name)
    TagSummary.objects.update_or_create(
        conversation=conversation,
        tag=tag,
        defaults={
            "summary": text,
            "tokens": size,
            "covers_until": covers_until,
            "embedding": vector_to_bytes(vector),
            "embedding_model": model.model_name,
        },
    )
