"""The deterministic turn tagger: keyphrases in, canonical tags out, no LLM.

Contract: ``KeyphraseTagger(max_tags).tag_turns(turns, vocab, lookback)`` returns
one ``TurnTagging`` per turn, in order, and never mutates ``vocab`` (the caller
writes the new tags and counts back).

- Candidates are content-word unigrams and adjacent bigrams within a sentence
  (stop and filler words out, words of at least 3 letters, no numbers, fenced
  code, URLs and a lowercase word after a pronoun or modal ignored); a
  capitalised word inside a sentence, an acronym or a camel-cased name counts
  as a proper name. Each candidate is canonicalised by ``canon.TagCanon`` and
  scored ``(1 + ln tf) × idf`` over the turns seen so far (``history`` and
  earlier turns of the batch), ×1.5 for a bigram, ×1.5 for a proper name. A tag
  that already exists (in ``vocab`` or earlier in the batch) takes the idf of a
  never-seen word ×1.5 instead, so it outranks any new word said as often:
  tags converge on the vocabulary. A new bigram must be said twice, be a name,
  or recur from an earlier turn; one made only of existing tags is dropped in
  their favour (``Postgres databases`` → ``postgres``, ``database``, never
  ``postgres-database``). Ties go to the phrase said first.
- A short turn (under 3 content words: "ok do that", "yes thanks", "can you
  make it shorter?") inherits the tags of the last ``lookback`` turns, after
  its own keyphrases if it has any. The topic-shift gate stops that context
  bleed: when the turn has strong keyphrases (a proper name, a bigram, an
  existing tag absent from the window, or any keyphrase after a cue like "what
  about" / "by the way") and under 30% of its content words occur in the
  window, it keeps its own tags only. Tool turns always inherit.
- ``related`` holds existing tags the turn mentions below the cut and tags that
  co-occur with its primary tags (at least twice); ``new_tags`` the primary tags
  absent from the ``vocab`` passed in; ``fact_signals`` the sentences
  ``fact_sentences`` finds.
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memory_app.engine.canon import FILLER_WORDS, STOP_WORDS, TagCanon, word_fold, word_set
from memory_app.engine.dates import stamps_strip
from memory_app.engine.types import TagVocabulary, TurnTagging, TurnView

SHORT_CONTENT_WORDS = 3
SHIFT_OVERLAP = 0.3
MAX_RELATED = 3
KNOWN_BONUS = 1.5
MAX_FACTS = 5

# Dates and counts matter to facts, not to topics.
_CALENDAR = word_set(
    """
    january february march april june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday weekend week month year
    morning afternoon evening night tonight hour minute second daily weekly monthly
    three four five six seven eight nine ten eleven twelve twenty thirty forty fifty sixty
    seventy eighty ninety hundred thousand million billion half dozen
    """
)

_NOT_TOPICS = FILLER_WORDS | _CALENDAR

# The lowercase word after one of these is usually a verb or an adjective.
_VERB_CONTEXT = word_set(
    """
    i you we they he she it can could would will should must might shall please lets
    dont didnt doesnt did does do not never also just then
    am is are was were be been being im youre theyre ive weve youve hes shes its
    """
)

_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_URL = re.compile(r"\bhttps?://\S+|\bwww\.\S+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_TOKEN = re.compile(r"[^\W\d_][^\W_]*(?:['’-][^\W_]+)*")
_SHIFT_CUE = re.compile(
    r"\b(?:what|how) about\b|\blet'?s talk about\b|\bswitch(?:ing)? (?:topics?|gears)\b"
    r"|\b(?:different|new|another|unrelated) (?:topic|question|subject)\b|\bunrelated\b"
    r"|\bby the way\b|\bbtw\b|\bchange of (?:topic|subject)\b|\bon another note\b",
    re.I,
)
_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|im|i've|i'd|i'll|my|mine|we|we're|we've|we'll|our|ours)\b", re.I
)
_NOT_A_FACT = re.compile(
    r"^\s*(?:can|could|would|will|should) (?:you|i|we)\b|\bplease\b|\bhelp me\b"
    r"|\bi (?:think|guess|wonder|was wondering|hope|mean|see|understand)\b"
    r"|\b(?:i'm|i am) not sure\b|\bi (?:want|need|would like|'d like) to know\b"
    r"|\bi need (?:some )?(?:help|advice)\b",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:decided|decide to|agreed|settled on|chose|opted|going with|go with|switched to"
    r"|we'll use|let's use|will use)\b",
    re.I,
)


@dataclass(slots=True)
class _Phrase:
    tf: int = 0
    proper: bool = False
    words: int = 1
    first: int = 0  # content-word index of the first occurrence: ties go to the earlier


@dataclass(slots=True)
class _Analysis:
    """One turn's keyphrases, scored and keyed by canonical tag, best first."""

    words: set[str]
    content_count: int
    scored: list[tuple[str, float, _Phrase]]
    cue: bool


@dataclass(slots=True)
class _Batch:
    """What the tagger has seen so far in one call."""

    canon: TagCanon
    known_at_start: frozenset[str]
    window: deque[tuple[list[str], set[str]]]
    df: Counter[str] = field(default_factory=Counter)
    seen: int = 0
    pairs: Counter[tuple[str, str]] = field(default_factory=Counter)

    def record(self, tags: list[str], words: set[str], candidates: Iterable[str]) -> None:
        for tag in tags:
            self.canon.add(tag)
        self.df.update(set(candidates) | set(tags))
        self.seen += 1
        ordered = sorted(set(tags))
        self.pairs.update((a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :])
        self.window.append((tags, words))


class KeyphraseTagger:
    """Tags turns from their own words, converging on the existing vocabulary."""

    def __init__(self, max_tags: int = 3) -> None:
        if max_tags < 1:
            raise ValueError("max_tags must be at least 1")
        self.max_tags = max_tags

    def tag_turns(
        self,
        turns: list[TurnView],
        vocab: TagVocabulary,
        lookback: int = 3,
        *,
        history: Sequence[TurnView] = (),
    ) -> list[TurnTagging]:
        """Tag ``turns`` in order; ``history`` (already tagged turns before them)
        seeds the lookback window, the idf statistics and co-occurrence."""
        batch = _Batch(TagCanon(vocab), frozenset(vocab.counts), deque(maxlen=max(lookback, 0)))
        for past in history:
            analysis = _analyse(stamps_strip(past.text), batch)
            tags = [t for t in (batch.canon.canonical(tag) for tag in past.tags) if t]
            batch.record(tags, analysis.words, (tag for tag, _, _ in analysis.scored))
        results = []
        for turn in turns:
            analysis = _analyse(stamps_strip(turn.text), batch)
            tagging = self._tag_one(turn, analysis, batch)
            batch.record(tagging.tags, analysis.words, (tag for tag, _, _ in analysis.scored))
            results.append(tagging)
        return results

    def _tag_one(self, turn: TurnView, analysis: _Analysis, batch: _Batch) -> TurnTagging:
        own = _select([tag for tag, _, _ in analysis.scored], self.max_tags)
        inherited = _window_tags(batch)
        if turn.role == "tool" and inherited:
            tags = inherited[: self.max_tags]
        elif analysis.content_count < SHORT_CONTENT_WORDS and inherited:
            tags = self._short_turn_tags(analysis, batch, inherited)
        else:
            tags = own
        return TurnTagging(
            position=turn.position,
            tags=tags,
            related=_related(tags, analysis, batch),
            new_tags=[tag for tag in tags if tag not in batch.known_at_start],
            fact_signals=fact_sentences(turn.text, turn.role),
        )

    def _short_turn_tags(
        self, analysis: _Analysis, batch: _Batch, inherited: list[str]
    ) -> list[str]:
        window_tags = set(inherited)
        window_words = set().union(*(words for _, words in batch.window))
        strong = [
            tag
            for tag, _, phrase in analysis.scored
            if analysis.cue
            or phrase.proper
            or phrase.words > 1
            or (tag in batch.canon and tag not in window_tags)
        ]
        overlap = (
            len(analysis.words & window_words) / len(analysis.words) if analysis.words else 1.0
        )
        own = [tag for tag, _, _ in analysis.scored]
        if strong and overlap < SHIFT_OVERLAP:
            return _select(own, self.max_tags)
        return _select([*own, *inherited], self.max_tags)


# ---------------------------------------------------------------- candidates and scores


def _analyse(text: str, batch: _Batch) -> _Analysis:
    phrases, words, count = _phrases(text)
    by_tag: dict[str, _Phrase] = {}
    for raw, phrase in phrases.items():
        tag = batch.canon.canonical(raw)
        if not tag or _weak_bigram(tag, phrase, batch):
            continue
        merged = by_tag.setdefault(tag, _Phrase(words=phrase.words, first=phrase.first))
        merged.tf += phrase.tf
        merged.proper = merged.proper or phrase.proper
        merged.first = min(merged.first, phrase.first)
    scored = [(tag, _score(tag, phrase, batch), phrase) for tag, phrase in by_tag.items()]
    scored.sort(key=lambda s: (-s[1], s[2].first, s[0]))
    return _Analysis(words, count, scored, bool(_SHIFT_CUE.search(text)))


def _weak_bigram(tag: str, phrase: _Phrase, batch: _Batch) -> bool:
    """A new bigram needs evidence: said twice, a name, or seen in an earlier turn.

    One made only of existing tags would be a near-duplicate of them."""
    if phrase.words < 2 or tag in batch.canon:
        return False
    if all(batch.canon.canonical(word) in batch.canon for word in tag.split("-")):
        return True
    return phrase.tf < 2 and not phrase.proper and batch.df[tag] == 0


def _score(tag: str, phrase: _Phrase, batch: _Batch) -> float:
    # An existing tag is scored as if it were new to the conversation, then
    # boosted: recurring topic tags must not lose to every fresh word.
    novel = 1.0 + math.log(1 + batch.seen)
    known = tag in batch.canon
    idf = novel * KNOWN_BONUS if known else 1.0 + math.log((1 + batch.seen) / (1 + batch.df[tag]))
    score = (1.0 + math.log(phrase.tf)) * idf
    if phrase.words > 1:
        score *= 1.5
    if phrase.proper:
        score *= 1.5
    return score


def _phrases(text: str) -> tuple[dict[str, _Phrase], set[str], int]:
    """Raw keyphrases with their stats, the folded content words, and how many there were."""
    phrases: dict[str, _Phrase] = {}
    words: set[str] = set()
    count = 0
    for sentence in _sentences(text):
        previous: tuple[str, bool] | None = None
        for token, proper in _content_tokens(sentence):
            if token is None:
                previous = None
                continue
            words.add(word_fold(token))
            _add(phrases, token, proper, 1, count)
            if previous is not None:
                _add(phrases, f"{previous[0]} {token}", proper and previous[1], 2, count - 1)
            previous = (token, proper)
            count += 1
    return phrases, words, count


def _add(phrases: dict[str, _Phrase], raw: str, proper: bool, words: int, first: int) -> None:
    phrase = phrases.setdefault(raw, _Phrase(words=words, first=first))
    phrase.tf += 1
    phrase.proper = phrase.proper or proper


def _sentences(text: str) -> list[str]:
    text = _URL.sub(" ", _CODE_FENCE.sub("\n", text))
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def _content_tokens(sentence: str) -> Iterable[tuple[str | None, bool]]:
    """(lowercase token, is a proper name) per content word; (None, False) otherwise.

    A lowercase word right after a pronoun or modal ("you should *create*") is
    taken for a verb, not a topic."""
    before = ""
    for index, match in enumerate(_TOKEN.finditer(sentence)):
        token = match.group().replace("’", "'")
        lower = token.lower()
        bare = lower.replace("'", "")
        proper = (token[0].isupper() and index > 0) or any(ch.isupper() for ch in token[1:])
        verb = before in _VERB_CONTEXT and not proper
        before = bare
        if verb or not _topical(lower, bare):
            yield None, False
        else:
            yield (lower[:-2] if lower.endswith("'s") else bare), proper


def _topical(lower: str, bare: str) -> bool:
    if len(bare) < 3 or lower in STOP_WORDS or bare in STOP_WORDS:
        return False
    return bare not in _NOT_TOPICS and word_fold(bare) not in _NOT_TOPICS


# ---------------------------------------------------------------- selection


def _select(ranked: Iterable[str], limit: int) -> list[str]:
    """The first ``limit`` tags, skipping any already said by a chosen tag."""
    chosen: list[str] = []
    for tag in ranked:
        if len(chosen) == limit:
            break
        if tag in chosen or _covered(tag, chosen):
            continue
        chosen.append(tag)
    return chosen


def _covered(tag: str, chosen: list[str]) -> bool:
    words = set(tag.split("-"))
    if any(words <= set(other.split("-")) for other in chosen):
        return True
    singles = {other for other in chosen if "-" not in other}
    return len(words) > 1 and words <= singles


def _window_tags(batch: _Batch) -> list[str]:
    """The window's tags, most frequent first, then most recent."""
    score: Counter[str] = Counter()
    recency: dict[str, int] = {}
    for age, (tags, _) in enumerate(reversed(batch.window)):
        for rank, tag in enumerate(tags):
            score[tag] += 1
            recency.setdefault(tag, age * 10 + rank)
    return sorted(score, key=lambda tag: (-score[tag], recency[tag], tag))


def _related(tags: list[str], analysis: _Analysis, batch: _Batch) -> list[str]:
    mentioned = [tag for tag, _, _ in analysis.scored if tag in batch.canon and tag not in tags]
    partners: Counter[str] = Counter()
    for (a, b), n in batch.pairs.items():
        if n >= 2 and (a in tags) != (b in tags):
            partners[b if a in tags else a] += n
    ranked = sorted(partners, key=lambda tag: (-partners[tag], tag))
    return _select([*mentioned, *ranked], MAX_RELATED)


# ---------------------------------------------------------------- fact signals


def fact_sentences(text: str, role: str = "user") -> list[str]:
    """Sentences that state something about the user or a decision taken.

    A user's first-person statement ("I moved to Berlin", "my budget is
    $3,000") or any decision ("we decided to use Postgres"), not a question or
    request; from other roles, only decisions."""
    if role not in {"user", "assistant"}:
        return []
    found = []
    for sentence in _sentences(text):
        sentence = " ".join(sentence.split())
        words = len(sentence.split())
        if words < 3 or words > 60 or sentence.endswith("?") or _NOT_A_FACT.search(sentence):
            continue
        decision = bool(_DECISION.search(sentence))
        if decision or (role == "user" and _FIRST_PERSON.search(sentence)):
            found.append(sentence)
        if len(found) == MAX_FACTS:
            break
    return found
