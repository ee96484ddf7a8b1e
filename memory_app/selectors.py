"""Reads of the memory, shaped for the engine (``TurnView``) or for interfaces.

Every selector takes the conversation (already scoped to its account by the
caller) or an account id, never a bare row id from outside.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from memory_app.engine.types import TagVocabulary, TurnView
from memory_app.models import Conversation, Tag, TagAlias, Turn, TurnTag
from proxy_app.formats import turns_of
from proxy_app.formats.types import FORMATS


def tool_ids(format: str, item: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The tool call ids a stored item makes and the ids of calls it answers."""
    if format not in FORMATS:
        return [], []
    try:
        parsed = turns_of(format, [item])  # type: ignore[arg-type]
    except Exception:
        return [], []
    calls = [i for t in parsed for i in t.tool_call_ids]
    results = [i for t in parsed for i in t.tool_result_ids]
    return calls, results


def turn_view(turn: Turn, format: str, tags: list[str] | None = None) -> TurnView:
    calls, results = tool_ids(format, turn.content)
    return TurnView(
        position=turn.position,
        role=turn.role,
        text=turn.text,
        tokens=turn.token_count,
        session_date=turn.session_date,
        created_at=turn.created_at,
        tags=tags or [],
        tool_calls=calls,
        tool_results=results,
    )


def active_turns(conversation: Conversation, *, from_position: int = 0) -> list[Turn]:
    return list(
        Turn.objects.filter(
            conversation=conversation, replaced=False, position__gte=from_position
        ).order_by("position")
    )


def turn_tags(turn_ids: Iterable[int]) -> dict[int, list[str]]:
    """Primary tag names per turn id, heaviest first."""
    tags: dict[int, list[str]] = defaultdict(list)
    rows = (
        TurnTag.objects.filter(turn_id__in=list(turn_ids), related=False)
        .order_by("turn_id", "-weight", "tag__name")
        .values_list("turn_id", "tag__name")
    )
    for turn_id, name in rows:
        tags[turn_id].append(name)
    return tags


def turn_views(conversation: Conversation, turns: list[Turn]) -> list[TurnView]:
    tags = turn_tags(t.pk for t in turns)
    return [turn_view(t, conversation.format, tags.get(t.pk, [])) for t in turns]


def vocabulary(conversation: Conversation) -> TagVocabulary:
    vocab = TagVocabulary()
    for tag in Tag.objects.filter(conversation=conversation):
        vocab.counts[tag.name] = tag.turn_count
        if tag.description:
            vocab.descriptions[tag.name] = tag.description
    for alias, name in TagAlias.objects.filter(tag__conversation=conversation).values_list(
        "alias", "tag__name"
    ):
        vocab.aliases[alias] = name
    return vocab
