"""Summaries of segments (level 1) and of tags (level 2).

Contract, for both summarisers:

- ``summarise(plan, turns, max_tokens, count)`` summarises the turns of ``plan``
  (``turns`` may hold more; only the plan's positions are read) into at most
  ``max_tokens`` as measured by ``count``. A plan with a ``session_date`` gets a
  leading ``[YYYY-MM-DD]`` line. ``Summary.tags`` starts with ``plan.tags`` in
  order; a summariser may append tags, never drop one.
- ``tag_summary(tag, segment_summaries, max_tokens, count)`` rolls up the
  summaries of the segments carrying ``tag`` (``(start position, text)`` pairs,
  any order) into one chronological summary of at most ``max_tokens``, tagged
  ``[tag]``.

``ExtractiveSummariser`` is deterministic and needs no model: it keeps the most
informative sentences verbatim (numbers, amounts and dates, names and code
identifiers, what the user says about themselves, decisions and changes,
questions and their answers), drops filler and near-duplicates, and prints what
it keeps in chronological order, one ``speaker: …`` line per turn.

``LLMSummariser`` asks a model for ``{"summary": str, "tags": [str]}`` and falls
back to the extractive summariser whenever the model fails or its reply cannot
be used, so a summary is always produced.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import date
from typing import Protocol

from memory_app.engine.jsontext import json_from_model_text
from memory_app.engine.types import LLM, CompactionSettings, SegmentPlan, Summary, TurnView

log = logging.getLogger(__name__)

Count = Callable[[str], int]

LLM_ROLE = "compactor"  # the ledger's component for every summarising call


class Summariser(Protocol):
    def summarise(
        self, plan: SegmentPlan, turns: list[TurnView], max_tokens: int, count: Count
    ) -> Summary: ...

    def tag_summary(
        self, tag: str, segment_summaries: list[tuple[int, str]], max_tokens: int, count: Count
    ) -> Summary: ...


def summary_budget(segment_tokens: int, settings: CompactionSettings) -> int:
    """The size target of a segment's summary: a share of the segment, capped."""
    share = round(segment_tokens * settings.summary_ratio)
    return max(1, min(settings.summary_max_tokens, share))


# ------------------------------------------------------------- sentence scoring

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[\w$€£%'.-]+")
_DIGIT = re.compile(r"\d")
_AMOUNT = re.compile(r"[$€£¥]\s?\d|\d\s?(?:%|percent\b|dollars\b|usd\b|eur\b|euros?\b|k\b)", re.I)
_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_DATE = re.compile(
    rf"\b(?:{_MONTHS})\b\.?\s*\d|\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?\b"
    r"|\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b"
    r"|\b(?:yesterday|today|tomorrow|tonight|last (?:week|month|year)|next (?:week|month|year)"
    r"|\d+ (?:days?|weeks?|months?|years?) ago)\b",
    re.I,
)
_CAMEL = re.compile(r"^[A-Za-z]+[a-z][A-Z]\w*$")
_CODE = re.compile(r"`[^`]+`|\b\w+_\w+\b|\b[A-Za-z_]\w*\.[A-Za-z_]\w*|\b\w+\(\)")
_FIRST_PERSON = re.compile(r"\bI\b|\bI'(?:m|ve|d|ll)\b|\b(?:my|mine|me|we|we're|our|us)\b", re.I)
_DECISION = re.compile(
    r"\b(?:decided|decide|will|won't|going to|plan(?:ning)? to|switched|switch(?:ing)?|moved"
    r"|changed|now|no longer|instead|started|stopped|quit|bought|sold|upgraded|replaced"
    r"|cancel(?:l?ed)?|chose|picked|settled on)\b",
    re.I,
)
_FILLER = re.compile(
    r"^(?:sure|thanks|thank you|great question|good question|of course|certainly|absolutely"
    r"|no problem|you're welcome|okay|ok|hi|hello|hey|got it|glad)\b"
    r"|happy to help|hope (?:this|that) helps|let me know if|feel free to|great question",
    re.I,
)
_PRONOUN_I = {"I", "I'm", "I've", "I'd", "I'll"}


def _entities(words: list[str]) -> set[str]:
    """Names and identifiers: capitalised non-initial words, CamelCase, code."""
    found = {
        w.strip(".'") for w in words[1:] if w[:1].isupper() and w.strip(".'") not in _PRONOUN_I
    }
    found.update(w for w in words if _CAMEL.match(w))
    return {w for w in found if w}


def info_score(text: str, role: str) -> float:
    """How much a sentence is worth keeping; below zero for filler."""
    words = _WORD.findall(text)
    score = 0.0
    if _DIGIT.search(text):
        score += 2.0
    if _AMOUNT.search(text):
        score += 1.0
    if _DATE.search(text):
        score += 1.5
    score += min(4, len(_entities(words)) + len(_CODE.findall(text)))
    if _FIRST_PERSON.search(text):
        score += 1.5 if role == "user" else 0.5
    if _DECISION.search(text):
        score += 1.5
    if _FILLER.search(text):
        score -= 3.0
    if len(words) < 4 and score < 2:
        score -= 1.0
    if role == "tool":
        score -= 1.0  # the assistant's reading of a tool result is usually the better line
    return score


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _near_duplicate(words: set[str], kept: list[set[str]]) -> bool:
    return any(len(words & other) / max(1, len(words | other)) >= 0.8 for other in kept)


# ------------------------------------------------------------- selection and layout


@dataclass(slots=True)
class _Sentence:
    order: tuple[int, int, int]  # (group, line, sentence): chronological
    speaker: str
    text: str
    score: float
    day: str | None = None


def _select(candidates: list[_Sentence], max_tokens: int, count: Count, header: str = "") -> str:
    """``header`` and the best sentences that fit in ``max_tokens``, chronologically.

    Sentences are ranked by score per size, so one long line does not crowd out
    several dense ones; each is kept only if the whole text still fits. When
    not even one fits, the head of the best one that fits is kept rather than
    leaving the summary empty."""
    ranked = sorted(
        (c for c in candidates if c.score >= 0),
        key=lambda c: (-c.score / (1 + count(c.text) / 60), c.order),
    )
    chosen: list[_Sentence] = []
    kept_words: list[set[str]] = []
    text = header
    for sentence in ranked:
        words = _words(sentence.text)
        if _near_duplicate(words, kept_words):
            continue
        attempt = _render([*chosen, sentence], header)
        if count(attempt) <= max_tokens:
            chosen.append(sentence)
            kept_words.append(words)
            text = attempt
    if not chosen and ranked:
        cut = _cut(ranked[0], header, max_tokens, count)
        text = _render([cut], header) if cut is not None else text
    return text


def _cut(sentence: _Sentence, header: str, max_tokens: int, count: Count) -> _Sentence | None:
    """The longest head of ``sentence`` (whole words, marked "…") that fits."""
    words = sentence.text.split()
    keep = len(words) - 1
    while keep >= 1:
        shorter = replace(sentence, text=" ".join(words[:keep]) + " …")
        if count(_render([shorter], header)) <= max_tokens:
            return shorter
        keep = min(keep - 1, keep * 4 // 5)
    return None


def _render(sentences: Iterable[_Sentence], header: str = "") -> str:
    lines = [header] if header else []
    day: str | None = None
    line_key: tuple[int, int] | None = None
    for sentence in sorted(sentences, key=lambda s: s.order):
        if sentence.day is not None and sentence.day != day:
            day = sentence.day
            lines.append(f"[{day}]")
            line_key = None
        if sentence.order[:2] == line_key:
            lines[-1] += " " + sentence.text
        else:
            line_key = sentence.order[:2]
            lines.append(
                f"{sentence.speaker}: {sentence.text}" if sentence.speaker else sentence.text
            )
    return "\n".join(lines)


def _header(day: date | None) -> str:
    return f"[{day.isoformat()}]" if day else ""


def _turn_sentences(turns: list[TurnView]) -> list[_Sentence]:
    """Scored sentences of consecutive turns; a question and its answer gain a point."""
    found: list[_Sentence] = []
    asked = False
    for line, turn in enumerate(turns):
        answering = asked and turn.role == "assistant"
        asked = False
        for index, text in enumerate(split_sentences(turn.text)):
            score = info_score(text, turn.role)
            if turn.role == "user" and text.endswith("?"):
                score += 1.0
                asked = True
            elif answering and index == 0:
                score += 1.0
            found.append(_Sentence((0, line, index), turn.role, text, score))
    return found


_DAY_LINE = re.compile(r"^\[(\d{4}-\d{2}-\d{2})\]\s*(.*)$")
_SPEAKER = re.compile(r"^(user|assistant|tool|system):\s*(.*)$")


_OFF_TOPIC_FLOOR = 3.0  # the info score a sentence not naming the tag needs to stay


def _summary_sentences(group: int, text: str, tag: str) -> list[_Sentence]:
    """Scored sentences of one segment summary; mentioning ``tag`` earns a bonus."""
    found: list[_Sentence] = []
    day: str | None = None
    for line, raw in enumerate(text.splitlines()):
        dated = _DAY_LINE.match(raw.strip())
        if dated:
            day, raw = dated.group(1), dated.group(2)
        spoken = _SPEAKER.match(raw.strip())
        speaker, body = (spoken.group(1), spoken.group(2)) if spoken else ("", raw)
        for index, sentence in enumerate(split_sentences(body)):
            score = info_score(sentence, speaker or "assistant")
            if _mentions(sentence, tag):
                score += 5.0
            elif score < _OFF_TOPIC_FLOOR:
                score = -1.0  # neither about the tag nor worth keeping anyway
            found.append(_Sentence((group, line, index), speaker, sentence, score, day))
    return found


def _mentions(sentence: str, tag: str) -> bool:
    lowered = sentence.lower()
    if tag.lower() in lowered:
        return True
    parts = [p for p in re.split(r"[-_\s/.]+", tag.lower()) if len(p) >= 3]
    return bool(parts) and bool(set(parts) & _words(sentence))


# ------------------------------------------------------------- summarisers


class ExtractiveSummariser:
    """Keeps the most informative sentences verbatim; needs no model."""

    def summarise(
        self, plan: SegmentPlan, turns: list[TurnView], max_tokens: int, count: Count
    ) -> Summary:
        members = _plan_turns(plan, turns)
        text = _select(_turn_sentences(members), max_tokens, count, _header(plan.session_date))
        return Summary(text=text, tokens=count(text), tags=list(plan.tags))

    def tag_summary(
        self, tag: str, segment_summaries: list[tuple[int, str]], max_tokens: int, count: Count
    ) -> Summary:
        candidates: list[_Sentence] = []
        ordered = sorted(segment_summaries, key=lambda pair: pair[0])
        for group, (_, text) in enumerate(ordered):
            candidates.extend(_summary_sentences(group, text, tag))
        text = _select(candidates, max_tokens, count)
        return Summary(text=text, tokens=count(text), tags=[tag])


def _plan_turns(plan: SegmentPlan, turns: list[TurnView]) -> list[TurnView]:
    wanted = set(plan.positions)
    return sorted((t for t in turns if t.position in wanted), key=lambda t: t.position)


_SEGMENT_SYSTEM = (
    "You condense part of a conversation into notes that a memory system will show "
    "the assistant later instead of the original turns. Anything you leave out is "
    "lost, so keep every concrete detail: exact numbers, amounts, prices, dates, "
    "names of people, places, products and code, what the user said about "
    "themselves, decisions, and anything that changed (what it was before and what "
    "it is now). Leave out greetings, thanks and pleasantries. Write in the third "
    "person ('the user …', 'the assistant …'). Reply with one JSON object and "
    'nothing else: {"summary": "<the notes>", "tags": ["<tag>", …]}. "tags" lists '
    "only NEW topic tags (lowercase, hyphenated) that the existing tags miss; use "
    "[] when they already cover the excerpt."
)

_TAG_SYSTEM = (
    "You merge dated notes about one topic of a long conversation into a single "
    "summary of that topic, oldest first. Keep exact numbers, amounts, dates, names "
    "and every change of state, saying which value is the current one. Drop what "
    'does not concern the topic. Reply with one JSON object and nothing else: {"summary": '
    '"<the merged notes>", "tags": []}.'
)


class LLMSummariser:
    """Asks a model for the summary; the extractive summariser stands in when the
    model fails or its reply is unusable."""

    def __init__(self, llm: LLM, fallback: Summariser | None = None) -> None:
        self.llm = llm
        self.fallback: Summariser = fallback or ExtractiveSummariser()

    def summarise(
        self, plan: SegmentPlan, turns: list[TurnView], max_tokens: int, count: Count
    ) -> Summary:
        members = _plan_turns(plan, turns)
        prompt = _segment_prompt(plan, members, max_tokens)
        try:
            reply = self.llm.complete(
                role=LLM_ROLE, system=_SEGMENT_SYSTEM, prompt=prompt, max_tokens=_room(max_tokens)
            )
            body, new_tags = parse_summary_reply(reply)
            text = _fit(body, _header(plan.session_date), max_tokens, count)
        except Exception:
            log.warning("segment summary by LLM failed; using the extractive one", exc_info=True)
            return self.fallback.summarise(plan, turns, max_tokens, count)
        tags = list(plan.tags) + [t for t in dict.fromkeys(new_tags) if t not in plan.tags]
        return Summary(text=text, tokens=count(text), tags=tags)

    def tag_summary(
        self, tag: str, segment_summaries: list[tuple[int, str]], max_tokens: int, count: Count
    ) -> Summary:
        ordered = sorted(segment_summaries, key=lambda pair: pair[0])
        notes = "\n\n".join(text.strip() for _, text in ordered)
        prompt = (
            f"Topic: {tag}\nWrite at most {_words_for(max_tokens)} words.\n\n"
            f"Notes, oldest first:\n\n{notes}"
        )
        try:
            reply = self.llm.complete(
                role=LLM_ROLE, system=_TAG_SYSTEM, prompt=prompt, max_tokens=_room(max_tokens)
            )
            body, _ = parse_summary_reply(reply)
            text = _fit(body, "", max_tokens, count)
        except Exception:
            log.warning("tag summary by LLM failed; using the extractive one", exc_info=True)
            return self.fallback.tag_summary(tag, segment_summaries, max_tokens, count)
        return Summary(text=text, tokens=count(text), tags=[tag])


def parse_summary_reply(reply: str) -> tuple[str, list[str]]:
    """The summary text and the normalised new tags of a model's reply.

    Raises ``ValueError`` when the reply is not the object asked for."""
    data = json_from_model_text(reply)
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError("model reply has no non-empty 'summary' string")
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError("model reply's 'tags' is not a list of strings")
    normalised = (re.sub(r"[\s_]+", "-", t.strip().lower()).strip("-")[:100] for t in tags)
    return summary.strip(), [t for t in normalised if t]


def _segment_prompt(plan: SegmentPlan, turns: list[TurnView], max_tokens: int) -> str:
    lines = [f"Write at most {_words_for(max_tokens)} words."]
    if plan.session_date:
        lines.append(f"Session date: {plan.session_date.isoformat()}")
    lines.append(f"Existing tags: {', '.join(plan.tags) if plan.tags else '(none)'}")
    lines.append("\nConversation excerpt:\n")
    lines.extend(f"{turn.role}: {turn.text.strip()}" for turn in turns)
    return "\n".join(lines)


def _words_for(max_tokens: int) -> int:
    return max(10, max_tokens * 3 // 4)  # about four tokens to three English words


def _room(max_tokens: int) -> int:
    """Completion budget: the summary, its JSON wrapping, and some slack."""
    return max_tokens * 2 + 256


def _fit(body: str, header: str, max_tokens: int, count: Count) -> str:
    """``header`` and as many leading sentences of ``body`` as fit; ``ValueError``
    when not even the first one does."""
    if header and body.startswith(header):
        header = ""
    text = _with_header(header, body)
    if count(text) <= max_tokens:
        return text
    kept: list[str] = []
    for sentence in split_sentences(body):
        attempt = _with_header(header, " ".join([*kept, sentence]))
        if count(attempt) > max_tokens:
            break
        kept.append(sentence)
    if not kept:
        raise ValueError(f"model summary does not fit in {max_tokens} tokens")
    return _with_header(header, " ".join(kept))


def _with_header(header: str, body: str) -> str:
    return "\n".join(part for part in (header, body) if part)
