"""The turn tagger backed by an LLM role (used when one is configured).

Contract: ``LLMTagger(llm, fallback).tag_turns(turns, vocab, lookback)`` returns
one ``TurnTagging`` per turn, like the keyphrase tagger. Turns go to the model
a few at a time with the live vocabulary (most used first) in the prompt, so
the model reuses existing tags and the vocabulary converges; each reply is
JSON ``{"turns": [{"position", "tags", "related", "facts"}]}``. Tags are
canonicalised against the vocabulary. A batch whose call fails or whose reply
does not parse is tagged by ``fallback`` instead, so tagging never stops.
"""

from __future__ import annotations

from typing import Any, Protocol

from memory_app.engine.canon import tag_canonical
from memory_app.engine.jsontext import json_from_model_text
from memory_app.engine.types import LLM, TagVocabulary, TurnTagging, TurnView

BATCH = 8
VOCAB_SHOWN = 80
TEXT_CHARS = 1_200

SYSTEM = (
    "You label the turns of a conversation with short topic tags so they can be "
    "found again later. Prefer tags from the existing vocabulary whenever one "
    "fits; invent a new tag only for a topic the vocabulary lacks. Tags are 1-3 "
    "lowercase words joined by hyphens, specific enough to tell topics apart "
    "(e.g. 'kitchen-renovation', not 'home'). For each turn also list related "
    "vocabulary tags, and copy any sentences that state a durable fact about "
    "the user or the task (a preference, a number, a decision, a change). "
    "Answer with JSON only."
)


class TurnTagger(Protocol):
    def tag_turns(
        self, turns: list[TurnView], vocab: TagVocabulary, lookback: int = 3
    ) -> list[TurnTagging]: ...


class LLMTagger:
    def __init__(self, llm: LLM, fallback: TurnTagger, max_tags: int = 3) -> None:
        self.llm = llm
        self.fallback = fallback
        self.max_tags = max_tags

    def tag_turns(
        self, turns: list[TurnView], vocab: TagVocabulary, lookback: int = 3
    ) -> list[TurnTagging]:
        out: list[TurnTagging] = []
        for start in range(0, len(turns), BATCH):
            batch = turns[start : start + BATCH]
            context = turns[max(0, start - lookback) : start]
            try:
                tagged = self._ask(batch, context, vocab)
            except (ValueError, KeyError, TypeError, RuntimeError, OSError):
                tagged = self.fallback.tag_turns(batch, vocab, lookback)
            for tagging in tagged:
                for name in tagging.tags:
                    vocab.counts[name] = vocab.counts.get(name, 0) + 1
            out.extend(tagged)
        return out

    def _ask(
        self, batch: list[TurnView], context: list[TurnView], vocab: TagVocabulary
    ) -> list[TurnTagging]:
        reply = self.llm.complete(
            role="tagger", system=SYSTEM, prompt=_prompt(batch, context, vocab), max_tokens=800
        )
        data = json_from_model_text(reply)
        rows = {int(row["position"]): row for row in data["turns"] if isinstance(row, dict)}
        return [self._tagging(turn, rows.get(turn.position), vocab) for turn in batch]

    def _tagging(
        self, turn: TurnView, row: dict[str, Any] | None, vocab: TagVocabulary
    ) -> TurnTagging:
        if row is None:
            raise ValueError(f"no tags for turn {turn.position}")
        tags = _names(row.get("tags"), vocab)[: self.max_tags]
        related = [n for n in _names(row.get("related"), vocab) if n not in tags]
        facts = [str(f) for f in row.get("facts") or [] if str(f).strip()]
        new = [n for n in tags if n not in vocab.counts]
        return TurnTagging(turn.position, tags, related, new, facts)


def _names(raw: Any, vocab: TagVocabulary) -> list[str]:
    if not isinstance(raw, list):
        return []
    names = (tag_canonical(str(item), vocab) for item in raw)
    return list(dict.fromkeys(n for n in names if n))


def _prompt(batch: list[TurnView], context: list[TurnView], vocab: TagVocabulary) -> str:
    shown = sorted(vocab.counts, key=lambda n: -vocab.counts[n])[:VOCAB_SHOWN]
    lines = ["Existing vocabulary: " + (", ".join(shown) if shown else "(empty)"), ""]
    if context:
        lines.append("Earlier turns, for context only:")
        lines += [f"[{t.position}] {t.role}: {t.text[:300]}" for t in context]
        lines.append("")
    lines.append("Turns to tag:")
    lines += [f"[{t.position}] {t.role}: {t.text[:TEXT_CHARS]}" for t in batch]
    lines += [
        "",
        'Reply as {"turns": [{"position": N, "tags": [..], "related": [..], '
        '"facts": [..]}]} with one entry per turn to tag.',
    ]
    return "\n".join(lines)
