"""Tagging new turns: tokens, session dates, tags and embeddings, in batches.

``turns_tag`` takes the active turns background tagging has not seen, in
position order, ``BATCH`` at a time (ingesting a 500-turn history is a few
dozen batches, one embedding call each), and writes back per turn its token
count, its learned session date, its tags (the vocabulary grows as it goes,
so later turns converge on earlier tags) and its embedding.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import date
from typing import Any

from django.db import transaction
from django.db.models import Count

from memory_app import selectors
from memory_app.config import MemoryConfig
from memory_app.embedding import embedder
from memory_app.engine import canon, dates, tokens
from memory_app.engine.keyphrase import KeyphraseTagger
from memory_app.engine.types import TagVocabulary, TurnTagging, TurnView
from memory_app.engine.vectors import vector_to_bytes
from memory_app.models import Conversation, Segment, SegmentTag, Tag, TagAlias, Turn, TurnTag

log = logging.getLogger(__name__)

BATCH = 64
SPLIT_EVERY = 50  # turns between checks for tags that cover too much
EMBED_CHARS = 2_000  # the embedder sees the head of long turns


def turns_tag(
    *, conversation: Conversation, config: MemoryConfig, progress: Callable[..., None]
) -> int:
    """Tag every untagged active turn; returns how many."""
    pending = list(
        Turn.objects.filter(conversation=conversation, replaced=False, tagged=False).order_by(
            "position"
        )
    )
    if not pending:
        return 0
    progress(0, len(pending))
    vocab = selectors.vocabulary(conversation)
    context = _context(conversation, pending[0].position, config.tagger_lookback)
    current_date = _learned_date(context[-1]) if context else None
    for start in range(0, len(pending), BATCH):
        batch = pending[start : start + BATCH]
        current_date = _measure(conversation, batch, current_date)
        views = [selectors.turn_view(t, conversation.format) for t in batch]
        taggings = _tagger(conversation).tag_turns(
            [*context, *views], vocab, lookback=config.tagger_lookback
        )
        fresh = {t.position: t for t in taggings if t.position >= batch[0].position}
        vectors = embedder().encode([t.text[:EMBED_CHARS] or t.role for t in batch])
        _write(conversation, batch, fresh, vectors, vocab)
        for view in views:
            view.tags = fresh[view.position].tags if view.position in fresh else []
        context = views[-config.tagger_lookback :] if config.tagger_lookback else []
        progress(len(batch))
    tags_embed(conversation=conversation)
    return len(pending)


def _context(conversation: Conversation, before: int, lookback: int) -> list[TurnView]:
    if not lookback:
        return []
    rows = list(
        Turn.objects.filter(
            conversation=conversation, replaced=False, tagged=True, position__lt=before
        ).order_by("-position")[:lookback]
    )
    return selectors.turn_views(conversation, rows[::-1])


def _learned_date(view: TurnView) -> date | None:
    """The session date a turn carries forward: only one learned from its text
    (a stored turn otherwise has the day it was received)."""
    if view.session_date and view.created_at and view.session_date != view.created_at.date():
        return view.session_date
    return None


def _measure(conversation: Conversation, batch: list[Turn], current: date | None) -> date | None:
    """Token counts and session dates; a learned date holds until the next one."""
    encoding = tokens.encoding_for(conversation.format, conversation.model)
    for turn in batch:
        turn.token_count = tokens.count_item(conversation.format, turn.content, encoding)
        if turn.role == "user":
            learned = dates.session_date_of(turn.text)
            current = learned or current
        if current:
            turn.session_date = current
    return current


def _tagger(conversation: Conversation) -> Any:
    from memory_app.llm import llm_settings_for

    llm = llm_settings_for(conversation.account)
    if llm is not None:
        from memory_app.engine.llm_tagger import LLMTagger
        from memory_app.llm import LLMClient

        client = LLMClient(llm, account_id=conversation.account_id, conversation_id=conversation.pk)
        return LLMTagger(client, fallback=KeyphraseTagger())
    return KeyphraseTagger()


@transaction.atomic
def _write(
    conversation: Conversation,
    batch: list[Turn],
    taggings: dict[int, TurnTagging],
    vectors: Any,
    vocab: TagVocabulary,
) -> None:
    model_name = embedder().model_name
    for turn, vector in zip(batch, vectors, strict=True):
        turn.embedding = vector_to_bytes(vector)
        turn.embedding_model = model_name
        turn.tagged = True
    Turn.objects.bulk_update(
        batch, ["token_count", "session_date", "embedding", "embedding_model", "tagged"]
    )
    names = {n for t in taggings.values() for n in [*t.tags, *t.related]}
    tags = _tags_ensure(conversation, names)
    rows = []
    for turn in batch:
        tagging = taggings.get(turn.position)
        if tagging is None:
            continue
        rows += _turn_tag_rows(turn, tagging, tags)
    TurnTag.objects.bulk_create(rows, ignore_conflicts=True)
    _counts_refresh(conversation, vocab, names)


def _turn_tag_rows(turn: Turn, tagging: TurnTagging, tags: dict[str, Tag]) -> list[TurnTag]:
    rows = [
        TurnTag(turn=turn, tag=tags[name], weight=1.0 / (rank + 1), related=False)
        for rank, name in enumerate(dict.fromkeys(tagging.tags))
        if name in tags
    ]
    primary = set(tagging.tags)
    rows += [
        TurnTag(turn=turn, tag=tags[name], weight=0.25, related=True)
        for name in dict.fromkeys(tagging.related)
        if name in tags and name not in primary
    ]
    return rows


def _tags_ensure(conversation: Conversation, names: set[str]) -> dict[str, Tag]:
    existing = {t.name: t for t in Tag.objects.filter(conversation=conversation, name__in=names)}
    missing = [Tag(conversation=conversation, name=n[:100]) for n in names if n not in existing]
    Tag.objects.bulk_create(missing, ignore_conflicts=True)
    return {t.name: t for t in Tag.objects.filter(conversation=conversation, name__in=names)}


def _counts_refresh(conversation: Conversation, vocab: TagVocabulary, names: set[str]) -> None:
    """Each touched tag's turn count (primary tags of active turns); the
    in-memory vocabulary follows so the next batch converges on it."""
    counts = dict(
        TurnTag.objects.filter(
            tag__conversation=conversation,
            tag__name__in=names,
            related=False,
            turn__replaced=False,
        )
        .values_list("tag__name")
        .annotate(n=Count("id"))
        .values_list("tag__name", "n")
    )
    tags = list(Tag.objects.filter(conversation=conversation, name__in=names))
    for tag in tags:
        tag.turn_count = counts.get(tag.name, 0)
        vocab.counts[tag.name] = tag.turn_count
    Tag.objects.bulk_update(tags, ["turn_count"])


def _segments_retag(tag: Tag, plan: dict[int, str], new_tags: dict[str, Tag]) -> None:
    """Segments that carried the split tag get the new tags of their turns."""
    rows = []
    for segment in Segment.objects.filter(segment_tags__tag=tag):
        names = {n for p, n in plan.items() if segment.start_position <= p <= segment.end_position}
        rows += [SegmentTag(segment=segment, tag=new_tags[n]) for n in names]
    SegmentTag.objects.bulk_create(rows, ignore_conflicts=True)


def tags_embed(*, conversation: Conversation) -> int:
    """Embed tag names (with descriptions) that have no vector yet: the inbound
    tagger compares a new message against these."""
    tags = list(Tag.objects.filter(conversation=conversation, embedding__isnull=True))
    if not tags:
        return 0
    model = embedder()
    vectors = model.encode([_tag_text(t) for t in tags])
    for tag, vector in zip(tags, vectors, strict=True):
        tag.embedding = vector_to_bytes(vector)
        tag.embedding_model = model.model_name
    Tag.objects.bulk_update(tags, ["embedding", "embedding_model"])
    return len(tags)


def _tag_text(tag: Tag) -> str:
    words = tag.name.replace("-", " ")
    return f"{words}: {tag.description}" if tag.description else words


@transaction.atomic
def tags_split(
    *, conversation: Conversation, config: MemoryConfig, new_turns: int | None = None
) -> list[str]:
    """Split tags that cover too much of the conversation into more specific
    ones; the old name stays as an alias. Returns the split tags.

    With ``new_turns`` (how many turns the job just tagged) the check runs only
    when the conversation crossed a multiple of ``SPLIT_EVERY`` turns, so a
    busy conversation does not rescan a broad tag's turns on every request."""
    total = Turn.objects.filter(conversation=conversation, replaced=False).count()
    crossed = new_turns is None or (total - new_turns) // SPLIT_EVERY != total // SPLIT_EVERY
    if not crossed:
        return []
    vocab = selectors.vocabulary(conversation)
    split = canon.tags_to_split(
        vocab, total, share=config.tag_split_share, min_turns=config.tag_split_min_turns
    )
    for name in split:
        _tag_split(conversation, name, vocab)
    return split


def _tag_split(conversation: Conversation, name: str, vocab: TagVocabulary) -> None:
    tag = Tag.objects.get(conversation=conversation, name=name)
    turns = list(
        Turn.objects.filter(turn_tags__tag=tag, turn_tags__related=False, replaced=False).order_by(
            "position"
        )
    )
    plan = canon.tag_split_plan(name, selectors.turn_views(conversation, turns), vocab)
    if len(set(plan.values())) < 2:
        return  # nothing distinctive enough to split on
    new_tags = _tags_ensure(conversation, set(plan.values()))
    by_position = {t.position: t for t in turns}
    TurnTag.objects.bulk_create(
        [
            TurnTag(turn=by_position[pos], tag=new_tags[new], weight=1.0)
            for pos, new in plan.items()
            if pos in by_position
        ],
        ignore_conflicts=True,
    )
    _segments_retag(tag, plan, new_tags)
    TurnTag.objects.filter(tag=tag).delete()
    largest = Counter(plan.values()).most_common(1)[0][0]
    TagAlias.objects.get_or_create(tag=new_tags[largest], alias=name)
    tag.delete()
    _counts_refresh(conversation, vocab, set(plan.values()))
