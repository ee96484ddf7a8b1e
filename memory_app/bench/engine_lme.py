"""LongMemEval evidence recall through the engine alone: a TUNING tool.

This is NOT the official benchmark. The official figures come from
``memory_app.bench.longmemeval``, which drives the real server over HTTP. This
tool calls the pure engine in-process (no server, no database, no Celery) so
retrieval and assembly knobs can be compared in minutes. Its figures are
indicative only: the real request path may tag, segment and compact
differently (for one, it compacts as the ceiling requires; here the watermark
is fixed).

Per LongMemEval question:

1. the haystack becomes turns exactly as the official harness sends them
   (``longmemeval.history_messages``: same-role turns merged, the session date
   as a header on each session's first user message); each turn's
   ``session_date`` is the date of its session (``haystack_dates``), its
   ``tokens`` ``engine.tokens.count_text``; the question is the last turn,
   ``[question_date] question``;
2. turns are tagged by ``KeyphraseTagger`` (the tag vocabulary is what it
   produced) and embedded (the head of each turn, as the tagging service does)
   with the chosen embedder: ``hashing`` (``engine.hashing.HashingEmbedder``)
   or ``minilm`` (``memory_app.embedding``, behind its on-disk cache in
   ``var/bench-cache`` so re-runs cost no model time; needs ``django.setup()``);
3. everything but the last ``PROTECTED`` turns is compacted: ``segments_plan``
   over them, each segment summarised by ``ExtractiveSummariser``;
4. a ``RetrievalIndex`` over the turn and segment units answers the question's
   ``Query`` (inbound tags from ``InboundTagger`` against the vocabulary, the
   embedding, ``date_range_for`` / ``order_hint_for`` with today =
   ``question_date``); hits go through ``expand_to_turns``;
5. ``assembly.plan_payload`` plans each ceiling; the payload text (a short
   system prompt, the stable block, the kept window, the recall block) is
   scored by the benchmark's own ``evidence.score_payload`` (imported, never
   re-implemented).

``--signals`` keeps only the named retrieval signals: the others get weight 0
and their query input is left out.

    python -m memory_app.bench.engine_lme [--limit N] [--ceilings 4000,8000]
        [--embedder hashing|minilm] [--signals tags,bm25,cosine]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from memory_app.bench.longmemeval import (
    DEFAULT_CACHE_DIR,
    evidence,
    history_messages,
    question_message,
    questions_select,
    split_path,
)
from memory_app.engine import assembly, dates, segmenter, temporal
from memory_app.engine.hashing import HashingEmbedder
from memory_app.engine.inbound import InboundTagger, vocab_matrix_build
from memory_app.engine.keyphrase import KeyphraseTagger
from memory_app.engine.retrieval import SIGNALS, RetrievalIndex, expand_to_turns
from memory_app.engine.summariser import ExtractiveSummariser, summary_budget
from memory_app.engine.tokens import count_text
from memory_app.engine.types import (
    CompactionSettings,
    Embedder,
    MemoryUnit,
    PlanInputs,
    Query,
    RetrievalSettings,
    Scored,
    TagVocabulary,
    TurnView,
)

DEFAULT_CEILINGS = (4_000, 8_000, 16_000, 32_000)
PROTECTED = 6  # the last turns stay verbatim: watermark = len(turns) - PROTECTED
SYSTEM_PROMPT = "You are a helpful assistant. Answer the user's question."
EMBED_CHARS = 2_000  # as services.tagging: the embedder sees the head of long turns
SEARCH_LIMIT = 300
EMBEDDERS = ("hashing", "minilm")


@dataclass(slots=True)
class Options:
    ceilings: tuple[int, ...] = DEFAULT_CEILINGS
    signals: tuple[str, ...] = SIGNALS
    search_limit: int = SEARCH_LIMIT
    use_dates: bool = True
    protected: int = PROTECTED


@dataclass(slots=True)
class Prepared:
    """One question's engine state, independent of the ceiling."""

    turns: list[TurnView]
    watermark: int
    units: dict[str, MemoryUnit]
    scored: list[Scored]
    seconds: dict[str, float] = field(default_factory=dict)


# ------------------------------------------------------------------ embedders


def embedder_for(kind: str) -> Embedder:
    """``hashing``: the engine's; ``minilm``: the product's, behind the on-disk cache."""
    if kind == "hashing":
        return HashingEmbedder(384)
    if kind != "minilm":
        raise ValueError(f"--embedder must be one of {', '.join(EMBEDDERS)}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vcloud.settings.base")
    os.environ.setdefault("VC_EMBED_CACHE_DIR", str(DEFAULT_CACHE_DIR))
    os.environ["VC_EMBEDDER"] = "minilm"
    import django

    django.setup()
    from memory_app.embedding import embedder

    model = embedder()
    if "fallback" in model.model_name:
        raise RuntimeError(f"minilm did not load: {model.model_name}")
    return model


# ------------------------------------------------------------------ one question


def question_turns(question: dict[str, Any]) -> list[TurnView]:
    """The haystack as the official harness sends it, then the question, as TurnViews."""
    turns: list[TurnView] = []
    current: date | None = None
    for position, message in enumerate([*history_messages(question), question_message(question)]):
        text = message["content"]
        if message["role"] == "user":
            current = dates.session_date_of(text) or current
        turns.append(
            TurnView(
                position=position,
                role=message["role"],
                text=text,
                tokens=count_text(text),
                session_date=current,
            )
        )
    return turns


@dataclass(slots=True)
class Memory:
    """A question's tagged, embedded and compacted history (cached on disk)."""

    turns: list[TurnView]
    watermark: int
    units: list[MemoryUnit]
    matrix: Any
    vocab: TagVocabulary
    seconds: dict[str, float]


def prepare(question: dict[str, Any], embedder: Embedder, options: Options) -> Prepared:
    """Tag, embed, compact, index and search one question (see the module docstring)."""
    memory = memory_cached(question, embedder, options.protected)
    clock = dict(memory.seconds)
    started = time.perf_counter()
    weights = {name: (1.0 if name in options.signals else 0.0) for name in SIGNALS}
    index = RetrievalIndex.build(memory.units, memory.matrix, RetrievalSettings(weights=weights))
    query = query_for(question, memory.vocab, embedder, options)
    scored = expand_to_turns(index.search(query, options.search_limit), memory.units)
    clock["search"] = time.perf_counter() - started
    units = {u.key: u for u in memory.units}
    return Prepared(memory.turns, memory.watermark, units, scored, clock)


def memory_cached(question: dict[str, Any], embedder: Embedder, protected: int) -> Memory:
    """``memory_build``, kept in ``var/bench-cache/engine_lme`` between runs."""
    name = f"{question['question_id']}-{embedder.model_name}-{protected}-v2.pkl"
    path = Path(os.environ.get("VC_EMBED_CACHE_DIR", DEFAULT_CACHE_DIR)) / "engine_lme" / name
    if path.exists():
        with path.open("rb") as handle:
            memory: Memory = _Unpickler(handle).load()
        memory.seconds = {"cached": 0.0}
        return memory
    memory = memory_build(question, embedder, protected)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        pickle.dump(memory, handle)
    return memory


class _Unpickler(pickle.Unpickler):
    """Run as ``python -m``, this module is ``__main__``: read its classes from here."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__":
            module = __spec__.name if __spec__ else __name__
        return super().find_class(module, name)


def memory_build(question: dict[str, Any], embedder: Embedder, protected: int) -> Memory:
    clock: dict[str, float] = {}
    started = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal started
        now = time.perf_counter()
        clock[name] = clock.get(name, 0.0) + now - started
        started = now

    turns = question_turns(question)
    history = turns[:-1]
    vocab = TagVocabulary()
    for tagging in KeyphraseTagger().tag_turns(history, vocab):
        history[tagging.position].tags = tagging.tags
        for name in tagging.tags:
            vocab.counts[name] = vocab.counts.get(name, 0) + 1
    lap("tag")
    vectors = embedder.encode([t.text[:EMBED_CHARS] or t.role for t in history])
    lap("embed")

    watermark = max(0, len(turns) - protected)
    settings = CompactionSettings()
    compacted = history[:watermark]
    plans = segmenter.segments_plan(compacted, settings, vectors[:watermark] if compacted else None)
    summariser = ExtractiveSummariser()
    summaries = [
        summariser.summarise(plan, compacted, summary_budget(plan.tokens, settings), count_text)
        for plan in plans
    ]
    lap("compact")
    segment_vectors = (
        embedder.encode([s.text for s in summaries])
        if summaries
        else np.zeros((0, vectors.shape[1]), dtype=np.float32)
    )
    lap("embed")

    units: list[MemoryUnit] = [
        MemoryUnit(
            "turn",
            f"t:{t.position}",
            t.text,
            list(t.tags),
            t.position,
            t.position,
            t.session_date,
            t.tokens,
            t.position,
        )
        for t in history
    ]
    units += [
        MemoryUnit(
            "segment",
            f"s:{i}",
            summary.text,
            list(summary.tags),
            plan.start_position,
            plan.end_position,
            plan.session_date,
            summary.tokens,
            len(history) + i,
        )
        for i, (plan, summary) in enumerate(zip(plans, summaries, strict=True))
    ]
    matrix = np.vstack([vectors, segment_vectors]).astype(np.float32)
    return Memory(turns, watermark, units, matrix, vocab, clock)


def query_for(
    question: dict[str, Any], vocab: TagVocabulary, embedder: Embedder, options: Options
) -> Query:
    text = question["question"]
    today = dates.parse_date(question["question_date"])
    query = Query(text=text)
    if "tags" in options.signals and vocab.counts:
        names = vocab.names()
        matrix = vocab_matrix_build(names, embedder)
        query.tags = InboundTagger().tags_for(text, names, matrix, embedder)
    if "cosine" in options.signals:
        query.embedding = embedder.encode([text])[0]
    if options.use_dates and today is not None:
        query.date_range = temporal.date_range_for(text, today)
        query.order_hint = temporal.order_hint_for(text)
    return query


def payload_for(prepared: Prepared, ceiling: int, protected: int = PROTECTED) -> tuple[str, Any]:
    """The text sent upstream at ``ceiling`` and the plan behind it."""
    turns = prepared.turns
    plan = assembly.plan_payload(
        PlanInputs(
            ceiling=ceiling,
            fixed_tokens=count_text(SYSTEM_PROMPT),
            turns=turns,
            watermark=prepared.watermark,
            count=count_text,
            protected_turns=protected,
            scored=prepared.scored,
            units=prepared.units,
        )
    )
    if plan.passthrough:
        kept = turns
    else:
        wanted = set(plan.kept_positions)
        kept = [t for t in turns if t.position in wanted]
    parts = [SYSTEM_PROMPT, plan.stable_block]
    parts += [t.text for t in kept[:-1]]
    parts += [plan.recall_block, kept[-1].text if kept else ""]
    return "\n\n".join(p for p in parts if p), plan


# ------------------------------------------------------------------ the run


def run(
    questions: Sequence[dict[str, Any]],
    embedder: Embedder,
    options: Options,
    progress: Callable[[str], None] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """Rows per ceiling: ``evidence.score_payload`` rows plus payload tokens."""
    ev = evidence()
    rows: dict[int, list[dict[str, Any]]] = {c: [] for c in options.ceilings}
    for n, question in enumerate(questions, 1):
        prepared = prepare(question, embedder, options)
        for ceiling in options.ceilings:
            text, plan = payload_for(prepared, ceiling, options.protected)
            row = ev.score_payload(question, text)
            row["ceiling"] = ceiling
            row["payload_tokens"] = count_text(text)
            row["recalled"] = len(plan.recalled)
            row["parts"] = dict(plan.tokens_by_part)
            rows[ceiling].append(row)
        if progress is not None:
            hits = " ".join(
                "+" if rows[c][-1].get("hit") else ("." if rows[c][-1]["scored"] else "a")
                for c in options.ceilings
            )
            secs = " ".join(f"{k}={v:.1f}" for k, v in prepared.seconds.items())
            progress(f"[{n}/{len(questions)}] {question['question_id']} {hits}  {secs}")
    return rows


def report(rows: dict[int, list[dict[str, Any]]]) -> str:
    """Per ceiling ``evidence.summarise``, then a per-type table and mean payload tokens."""
    ev = evidence()
    summaries = {c: ev.summarise(rs) for c, rs in rows.items()}
    lines = [f"ceiling {c}: {json.dumps(s)}" for c, s in summaries.items()]
    ceilings = list(rows)
    types = sorted({t for s in summaries.values() for t in s["by_type"]})
    counts: dict[str, int] = defaultdict(int)
    for r in next(iter(rows.values()), []):
        if r.get("scored"):
            counts[r["question_type"]] += 1
    head = ["type", "n", *(f"{c // 1000}k" for c in ceilings)]
    lines += ["", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for t in types:
        cells = [f"{summaries[c]['by_type'].get(t, 0.0) * 100:.1f}%" for c in ceilings]
        lines.append(f"| {t} | {counts[t]} | " + " | ".join(cells) + " |")
    overall = [f"**{summaries[c]['hit_rate'] * 100:.1f}%**" for c in ceilings]
    lines.append(f"| all | {sum(counts.values())} | " + " | ".join(overall) + " |")
    recall = [f"{summaries[c]['session_recall'] * 100:.1f}%" for c in ceilings]
    lines.append("| session recall | | " + " | ".join(recall) + " |")
    tokens = [
        f"{np.mean([r['payload_tokens'] for r in rs]):.0f}" if rs else "-" for rs in rows.values()
    ]
    lines.append("| mean payload tokens | | " + " | ".join(tokens) + " |")
    for part in ("fixed", "stable", "window", "recall", "headroom"):
        means = [
            f"{np.mean([r.get('parts', {}).get(part, 0) for r in rs]):.0f}" if rs else "-"
            for rs in rows.values()
        ]
        lines.append(f"| mean {part} tokens | | " + " | ".join(means) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: Any = None) -> dict[int, list[dict[str, Any]]]:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m memory_app.bench.engine_lme",
        description="LongMemEval evidence recall through the engine alone "
        "(a tuning tool, not the official benchmark).",
    )
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--types", default="", help="comma-separated question types")
    parser.add_argument("--ceilings", default=",".join(map(str, DEFAULT_CEILINGS)))
    parser.add_argument("--embedder", choices=EMBEDDERS, default="hashing")
    parser.add_argument("--signals", default=",".join(SIGNALS))
    parser.add_argument("--search-limit", type=int, default=SEARCH_LIMIT)
    parser.add_argument("--no-dates", action="store_true", help="no date range or order hint")
    parser.add_argument("--protected", type=int, default=PROTECTED, help="turns kept verbatim")
    parser.add_argument("--json", default="", help="write the rows to this file")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    signals = tuple(s.strip() for s in args.signals.split(",") if s.strip())
    unknown = set(signals) - set(SIGNALS)
    if unknown or not signals:
        parser.error(f"--signals takes some of {', '.join(SIGNALS)}")
    options = Options(
        ceilings=tuple(int(c) for c in args.ceilings.split(",") if c.strip()),
        signals=signals,
        search_limit=args.search_limit,
        use_dates=not args.no_dates,
        protected=args.protected,
    )
    ev = evidence()
    types = [t for t in args.types.split(",") if t]
    questions = questions_select(
        ev.load_questions(str(split_path(args.split))), types=types, limit=args.limit
    )
    model = embedder_for(args.embedder)
    print(
        f"engine_lme (tuning tool, not the official benchmark): {len(questions)} questions, "
        f"embedder {model.model_name}, signals {','.join(signals)}, "
        f"dates {'on' if options.use_dates else 'off'}, ceilings {options.ceilings}",
        file=out,
    )
    started = time.perf_counter()
    rows = run(questions, model, options, None if args.quiet else lambda s: print(s, file=out))
    print(report(rows), file=out)
    print(f"{time.perf_counter() - started:.0f}s", file=out)
    if args.json:
        Path(args.json).write_text(json.dumps({str(c): rs for c, rs in rows.items()}, indent=1))
    return rows


if __name__ == "__main__":
    # Through the package, so that cached pickles name its classes, not __main__'s.
    from memory_app.bench.engine_lme import main as package_main

    package_main()
