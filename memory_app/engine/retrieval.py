"""Retrieval for one query over one conversation's memory.

Contract:

- ``RetrievalIndex.build(units, embeddings, settings)`` does once, per
  conversation state, everything that does not depend on the query (the caller
  caches the index until the conversation changes): a BM25 index (bm25s, the
  Lucene variant) over each unit's text, tokenised by ``text_tokens``; each
  tag's weight over the units; the units' embedding rows (``unit.embedding``
  is a row of ``embeddings``), scaled to unit length. Units with a repeated key
  are refused (``ValueError``).
- ``index.search(query, limit)`` returns at most ``limit`` ``Scored``, best
  first, ties in the order the units were given: the same index and query give
  the same list on every run and machine. Units of every kind (turns, segments,
  tag summaries) compete. Three signals each rank the units they match:

  * tags: the sum, over the tags a unit shares with the query, of the tag's
    weight times the query's weight for it (a related tag counts
    ``related_weight``). A tag's weight is its IDF over the units, and for a
    hub (on more than ``hub_share`` of the units and at least
    ``hub_min_units`` of them) also × (hub_share / share)²: a tag that is
    everywhere says little about any one unit. A unit matches at
    ``min_tag_score`` or more. Tags compare after plural folding.
  * bm25: a unit matches when its score is above zero. Question words that
    only say *when* ("ago", "first", "last", "recently") are left out.
  * cosine: against ``query.embedding``; a unit matches at ``min_cosine``. A
    unit without an embedding, or a query vector of another width, matches none.

  Equal scores share a rank. The fused score is Σ weight / (rrf_k + rank) over
  the signals that matched (reciprocal rank fusion), × ``embedding_only_factor``
  when cosine alone matched. With ``query.date_range``, a unit whose session
  date is inside gets × (1 + ``date_boost``), one dated before it
  × (1 − ``date_penalty``); a unit dated after the range is left alone (people
  tell of an event in later sessions: LongMemEval answers "in February" from a
  March session), and so is an undated one; an in-range unit that no signal
  matched still enters at ``date_only_weight`` / (rrf_k + 1). With ``query.order_hint``, the
  ``order_window`` best matched units are put in conversation order and the
  i-th earliest ("first") or latest ("last"), counting from 0, gets
  × (1 + ``order_boost`` / 2^i).
- ``expand_to_turns(scored, units, factor)`` replaces each segment hit by one
  hit per turn of its range (the unit key of that turn when given, else
  ``t:<position>``) at ``factor`` × the segment's score: a segment matches as
  a whole, and most of its turns are not what matched, so they rank after
  turns that matched themselves unless the segment's match was much
  stronger. A turn keeps the best score it gets (its own, or a segment's
  share); tag-summary hits stay; the result is sorted by score (ties: input
  order). The assembler can then prefer verbatim turns.
- ``bench(n_units, n_queries)`` builds a synthetic conversation and reports
  build time and per-query p50/p95 in milliseconds (a command's figures, never
  a test's assertion).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

import bm25s
import numpy as np
import numpy.typing as npt

from memory_app.engine.canon import STOP_WORDS, tag_fold, word_fold, word_set
from memory_app.engine.dates import stamps_strip
from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.types import Matrix, MemoryUnit, Query, RetrievalSettings, Scored
from memory_app.engine.vectors import normalise_rows

# bm25s sets its logger to DEBUG when imported: one "Building index" line per
# index built, which on the request path means one per planned request.
logging.getLogger("bm25s").setLevel(logging.WARNING)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

SIGNALS = ("tags", "bm25", "cosine")
_TOKEN = re.compile(r"[^\W_]+")
_APOSTROPHES = re.compile(r"['’]")
# Words of a question that say when or how it asks, not what about: temporal.py reads them.
_QUERY_NOISE = word_set(
    """
    ago first last time times recently recent latest earliest currently current
    previously earlier remind remember mentioned many much
    """
)


# ---------------------------------------------------------------- tokens


@lru_cache(maxsize=65_536)
def _fold(word: str) -> str:
    return word_fold(word)


@lru_cache(maxsize=8_192)
def _tag_key(name: str) -> str:
    return tag_fold(name.strip().lower())


def text_tokens(text: str) -> list[str]:
    """BM25 terms: lowercase words and numbers, plural-folded, without stop
    words and date stamps (``dates.stamps_strip``)."""
    words = _TOKEN.findall(_APOSTROPHES.sub("", stamps_strip(text).lower()))
    return [_fold(word) for word in words if word not in STOP_WORDS]


def _bm25_build(docs: list[list[str]]) -> tuple[Any, dict[str, int]]:
    """A bm25s index over token lists, with ids in first-seen order (bm25s's own use a set)."""
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(token, len(vocab)) for token in doc] for doc in docs]
    if not vocab:
        return None, vocab
    index = bm25s.BM25(method="lucene")
    index.index((ids, dict(vocab)), show_progress=False)
    return index, vocab


# ---------------------------------------------------------------- the index


@dataclass(slots=True)
class _TagTable:
    """Folded tag → the units carrying it, its weight, and whether it is a hub."""

    units: dict[str, npt.NDArray[np.intp]] = field(default_factory=dict)
    weight: dict[str, float] = field(default_factory=dict)
    hubs: frozenset[str] = frozenset()
    names: dict[str, str] = field(default_factory=dict)  # folded → a spelling to show

    @classmethod
    def build(
        cls, tag_sets: list[frozenset[str]], names: dict[str, str], s: RetrievalSettings
    ) -> _TagTable:
        carriers: dict[str, list[int]] = {}
        for row, tags in enumerate(tag_sets):
            for tag in sorted(tags):
                carriers.setdefault(tag, []).append(row)
        total = len(tag_sets)
        table = cls(names=names)
        hubs: set[str] = set()
        for tag, rows in carriers.items():
            df = len(rows)
            table.units[tag] = np.asarray(rows, dtype=np.intp)
            weight = math.log(1.0 + (total - df + 0.5) / (df + 0.5))
            share = df / total
            if share > s.hub_share and df >= s.hub_min_units:
                weight *= (s.hub_share / share) ** 2
                hubs.add(tag)
            table.weight[tag] = weight
        table.hubs = frozenset(hubs)
        return table


@dataclass(slots=True)
class _Signals:
    """One query's raw scores, match masks and ranks per signal (arrays over the units)."""

    scores: dict[str, Floats]
    matched: dict[str, Mask]
    ranks: dict[str, Ints]
    wanted_tags: dict[str, float]  # folded query tag → weight, related ones included


@dataclass(slots=True)
class RetrievalIndex:
    """Everything about one conversation's units that does not depend on the query."""

    units: tuple[MemoryUnit, ...]
    settings: RetrievalSettings
    tags: _TagTable
    unit_tags: list[frozenset[str]]
    bm25: Any  # bm25s.BM25, or None when no unit has a word
    vocab: dict[str, int]
    vectors: Matrix | None  # one unit-length row per unit; zero where it has none
    dates: Ints  # date ordinal per unit, 0 when undated
    starts: Ints
    ends: Ints

    @classmethod
    def build(
        cls,
        units: Sequence[MemoryUnit],
        embeddings: Matrix | None,
        settings: RetrievalSettings | None = None,
    ) -> RetrievalIndex:
        keys = [unit.key for unit in units]
        if len(set(keys)) != len(keys):
            raise ValueError("unit keys must be unique")
        names: dict[str, str] = {}
        unit_tags = [_fold_tags(unit.tags, names) for unit in units]
        s = settings or RetrievalSettings()
        bm25, vocab = _bm25_build([text_tokens(unit.text) for unit in units])
        return cls(
            units=tuple(units),
            settings=s,
            tags=_TagTable.build(unit_tags, names, s),
            unit_tags=unit_tags,
            bm25=bm25,
            vocab=vocab,
            vectors=_unit_vectors(units, embeddings),
            dates=np.asarray(
                [u.session_date.toordinal() if u.session_date else 0 for u in units], dtype=np.int64
            ),
            starts=np.asarray([unit.start_position for unit in units], dtype=np.int64),
            ends=np.asarray([unit.end_position for unit in units], dtype=np.int64),
        )

    # ------------------------------------------------------------ search

    def search(self, query: Query, limit: int = 50) -> list[Scored]:
        """The ``limit`` best units for ``query``, best first (see the module contract)."""
        if not self.units or limit <= 0:
            return []
        signals = self._signals(query)
        fused = self._fuse(signals)
        any_match = signals.matched["tags"] | signals.matched["bm25"] | signals.matched["cosine"]
        notes: dict[int, list[str]] = {}
        if query.date_range is not None:
            self._date_adjust(fused, any_match, query.date_range, notes)
        if query.order_hint in ("first", "last"):
            self._order_adjust(fused, any_match, query.order_hint, notes)
        order = np.lexsort((np.arange(len(self.units)), -fused))
        best = [int(i) for i in order[:limit] if fused[i] > 0.0]
        return [self._scored(i, float(fused[i]), signals, query, notes.get(i, [])) for i in best]

    def _signals(self, query: Query) -> _Signals:
        s = self.settings
        wanted = self._query_tags(query)
        scores = {
            "tags": self._tag_scores(wanted),
            "bm25": self._bm25_scores(query.text),
            "cosine": self._cosine_scores(query.embedding),
        }
        matched = {
            "tags": scores["tags"] >= max(s.min_tag_score, 1e-12),
            "bm25": scores["bm25"] > 0.0,
            "cosine": scores["cosine"] >= max(s.min_cosine, 1e-12),
        }
        ranks = {name: _ranks(scores[name], matched[name]) for name in SIGNALS}
        return _Signals(scores, matched, ranks, wanted)

    def _query_tags(self, query: Query) -> dict[str, float]:
        wanted: dict[str, float] = {}
        for name in query.related:
            wanted[_tag_key(name)] = self.settings.related_weight
        for name, weight in query.tags:
            key = _tag_key(name)
            wanted[key] = max(weight, wanted.get(key, 0.0))
        return {tag: weight for tag, weight in wanted.items() if weight > 0.0}

    def _tag_scores(self, wanted: dict[str, float]) -> Floats:
        scores = np.zeros(len(self.units), dtype=np.float64)
        for tag, weight in wanted.items():
            rows = self.tags.units.get(tag)
            if rows is not None:
                scores[rows] += self.tags.weight[tag] * weight
        return scores

    def _bm25_scores(self, text: str) -> Floats:
        terms = dict.fromkeys(t for t in text_tokens(text) if t not in _QUERY_NOISE)
        ids = [self.vocab[t] for t in terms if t in self.vocab]
        if self.bm25 is None or not ids:
            return np.zeros(len(self.units), dtype=np.float64)
        return np.asarray(self.bm25.get_scores_from_ids(ids), dtype=np.float64)

    def _cosine_scores(self, embedding: npt.ArrayLike | None) -> Floats:
        if embedding is None or self.vectors is None:
            return np.zeros(len(self.units), dtype=np.float64)
        vector = np.asarray(embedding, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0 or vector.shape[0] != self.vectors.shape[1]:
            return np.zeros(len(self.units), dtype=np.float64)
        return np.asarray(self.vectors @ (vector / norm), dtype=np.float64)

    def _fuse(self, signals: _Signals) -> Floats:
        s = self.settings
        fused = np.zeros(len(self.units), dtype=np.float64)
        for name in SIGNALS:
            hit = signals.matched[name]
            weight = s.weights.get(name, 1.0)
            fused[hit] += weight / (s.rrf_k + signals.ranks[name][hit])
        lexical = signals.matched["tags"] | signals.matched["bm25"]
        fused[signals.matched["cosine"] & ~lexical] *= s.embedding_only_factor
        return fused

    def _date_adjust(
        self, fused: Floats, any_match: Mask, span: tuple[date, date], notes: dict[int, list[str]]
    ) -> None:
        s = self.settings
        dated = self.dates > 0
        before = dated & (self.dates < span[0].toordinal())
        inside = dated & ~before & (self.dates <= span[1].toordinal())
        fused[inside & any_match] *= 1.0 + s.date_boost
        # a later session may tell of an event in the range; an earlier one cannot
        fused[before] *= 1.0 - s.date_penalty
        fused[inside & ~any_match] = s.date_only_weight / (s.rrf_k + 1)
        for row in np.flatnonzero(inside):
            notes.setdefault(int(row), []).append("in date range")
        for row in np.flatnonzero(before & any_match):
            notes.setdefault(int(row), []).append("before date range")

    def _order_adjust(
        self, fused: Floats, any_match: Mask, hint: str, notes: dict[int, list[str]]
    ) -> None:
        s = self.settings
        rows = np.flatnonzero(any_match & (fused > 0.0))
        if rows.size == 0 or s.order_window <= 0:
            return
        top = rows[np.lexsort((rows, -fused[rows]))][: s.order_window]
        when = self.starts[top] if hint == "first" else -self.ends[top]
        chronological = top[np.lexsort((top, when))]
        label = "earliest" if hint == "first" else "latest"
        for place, row in enumerate(chronological):
            fused[row] *= 1.0 + s.order_boost / 2**place
            if place == 0:
                notes.setdefault(int(row), []).append(f"{label} of top {top.size}")

    # ------------------------------------------------------------ explanations

    def _scored(
        self, row: int, score: float, signals: _Signals, query: Query, notes: list[str]
    ) -> Scored:
        matched = [name for name in SIGNALS if signals.matched[name][row]]
        why: list[str] = []
        if "tags" in matched:
            why.extend(self._tag_reasons(row, query, signals.wanted_tags))
        if "bm25" in matched:
            why.append(f"bm25 #{signals.ranks['bm25'][row]}")
        if "cosine" in matched:
            alone = matched == ["cosine"]
            why.append(
                f"cosine {signals.scores['cosine'][row]:.2f}" + (" only (damped)" if alone else "")
            )
        return Scored(
            key=self.units[row].key,
            score=score,
            signals={name: float(signals.scores[name][row]) for name in matched},
            ranks={name: int(signals.ranks[name][row]) for name in matched},
            why=why + notes,
        )

    def _tag_reasons(self, row: int, query: Query, wanted: dict[str, float]) -> list[str]:
        direct = {_tag_key(name) for name, _ in query.tags}
        shared = sorted(
            (tag for tag in self.unit_tags[row] if tag in wanted),
            key=lambda tag: (-self.tags.weight[tag] * wanted[tag], tag),
        )
        shown = [
            self.tags.names[tag] + (" (hub)" if tag in self.tags.hubs else "") for tag in shared
        ]
        reasons = []
        own = [label for tag, label in zip(shared, shown, strict=True) if tag in direct]
        related = [label for tag, label in zip(shared, shown, strict=True) if tag not in direct]
        if own:
            reasons.append("tags: " + ", ".join(own))
        if related:
            reasons.append("related: " + ", ".join(related))
        return reasons


def _fold_tags(tags: Iterable[str], names: dict[str, str]) -> frozenset[str]:
    folded = set()
    for name in tags:
        key = _tag_key(name)
        if key:
            names.setdefault(key, name)
            folded.add(key)
    return frozenset(folded)


def _unit_vectors(units: Sequence[MemoryUnit], embeddings: Matrix | None) -> Matrix | None:
    if embeddings is None or embeddings.ndim != 2 or embeddings.shape[0] == 0:
        return None
    vectors = np.zeros((len(units), embeddings.shape[1]), dtype=np.float32)
    for row, unit in enumerate(units):
        if unit.embedding is not None and 0 <= unit.embedding < embeddings.shape[0]:
            vectors[row] = embeddings[unit.embedding]
    return normalise_rows(vectors)


def _ranks(scores: Floats, matched: Mask) -> Ints:
    """1-based rank of each matched score, best first; equal scores share the better rank."""
    ranks = np.zeros(scores.shape[0], dtype=np.int64)
    values = scores[matched]
    if values.size:
        ascending_negated = -np.sort(values)[::-1]
        ranks[matched] = np.searchsorted(ascending_negated, -values, side="left") + 1
    return ranks


# ---------------------------------------------------------------- granularity


SEGMENT_TURN_FACTOR = 0.3  # a segment hit's turns score this share of the segment's score


def expand_to_turns(
    scored: Sequence[Scored], units: Sequence[MemoryUnit], factor: float = SEGMENT_TURN_FACTOR
) -> list[Scored]:
    """Segment hits replaced by their turns; see the module contract."""
    by_key = {unit.key: unit for unit in units}
    turn_keys = {unit.start_position: unit.key for unit in units if unit.kind == "turn"}
    best: dict[str, Scored] = {}
    for hit in scored:
        unit = by_key.get(hit.key)
        if unit is None or unit.kind != "segment":
            candidates = [hit]
        else:
            candidates = [
                Scored(
                    key=turn_keys.get(position, f"t:{position}"),
                    score=hit.score * factor,
                    signals=dict(hit.signals),
                    ranks=dict(hit.ranks),
                    why=[*hit.why, f"via {hit.key}"],
                )
                for position in range(unit.start_position, unit.end_position + 1)
            ]
        for candidate in candidates:
            if candidate.key not in best or candidate.score > best[candidate.key].score:
                best[candidate.key] = candidate
    order = {key: i for i, key in enumerate(best)}
    return sorted(best.values(), key=lambda h: (-h.score, order[h.key]))


# ---------------------------------------------------------------- benchmark

_BENCH_TAGS = tuple(f"topic-{i}" for i in range(40))


def _bench_words(rng: np.random.Generator, size: int) -> list[str]:
    syllables = ("ka", "lo", "mi", "ru", "te", "sa", "no", "vi", "da", "pe", "zu", "ho")
    vocabulary = ["".join(rng.choice(syllables, size=3)) for _ in range(size)]
    return vocabulary


def _bench_units(n_units: int, rng: np.random.Generator) -> list[MemoryUnit]:
    vocabulary = _bench_words(rng, 3_000)
    zipf = 1.0 / np.arange(1, len(vocabulary) + 1)
    zipf /= zipf.sum()
    units: list[MemoryUnit] = []
    first_day = date(2023, 1, 1)
    for i in range(n_units):
        kind, key = ("segment", f"s:{i}") if i % 10 == 9 else ("turn", f"t:{i}")
        words = rng.choice(vocabulary, size=int(rng.integers(60, 240)), p=zipf)
        tags = list(rng.choice(_BENCH_TAGS, size=int(rng.integers(1, 4)), replace=False))
        start = max(0, i - 8) if kind == "segment" else i
        day = first_day + timedelta(days=i // 10)
        units.append(MemoryUnit(kind, key, " ".join(words), tags, start, i, day, len(words), i))
    return units


def bench(n_units: int = 500, n_queries: int = 100, seed: int = 7) -> dict[str, float]:
    """Build an index over ``n_units`` synthetic units and time ``n_queries`` searches."""
    rng = np.random.default_rng(seed)
    units = _bench_units(n_units, rng)
    embedder = HashingEmbedder()
    matrix = embedder.encode([unit.text for unit in units])
    started = time.perf_counter()
    index = RetrievalIndex.build(units, matrix)
    build_ms = (time.perf_counter() - started) * 1000
    timings: list[float] = []
    for q in range(n_queries):
        source = units[int(rng.integers(0, n_units))]
        text = " ".join(rng.choice(source.text.split(), size=8))
        span = (
            (source.session_date, source.session_date + timedelta(days=7))
            if source.session_date and q % 3 == 0
            else None
        )
        query = Query(
            text=text,
            tags=[(tag, 0.8) for tag in source.tags[:2]],
            embedding=embedder.encode([text])[0],
            date_range=span,
            order_hint=("first", "last", None, None)[q % 4],
        )
        started = time.perf_counter()
        index.search(query)
        timings.append((time.perf_counter() - started) * 1000)
    p50, p95 = np.percentile(timings, [50, 95])
    return {
        "units": float(n_units),
        "queries": float(n_queries),
        "build_ms": round(build_ms, 2),
        "p50_ms": round(float(p50), 3),
        "p95_ms": round(float(p95), 3),
        "max_ms": round(max(timings), 3),
    }


if __name__ == "__main__":
    print(bench())
