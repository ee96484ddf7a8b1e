"""Ingestion benchmark (issue 4): a 500-turn, ~120k-token history stored at
once, then fully processed by the memory job — tokens, dates, tags,
embeddings (the real model unless VC_EMBEDDER says otherwise), compaction,
tag summaries. Prints the wall time of each phase and of the whole.

Runs against the configured database in a throwaway account that it deletes
afterwards.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from typing import Any

from django.contrib.auth import get_user_model

from memory_app.embedding import embedder
from memory_app.engine.tokens import count_text
from memory_app.models import Conversation, JobState, MemoryJob, Segment, Tag, TagSummary, Turn
from memory_app.services import jobs, pipeline
from vcloud.accounts.services import account_for_user

SUBJECTS = [
    ("kitchen renovation", ["cabinets", "quartz countertop", "plumbing", "contractor", "walnut"]),
    ("Japan trip", ["Kyoto ryokan", "JR Pass", "Fushimi Inari", "Tokyo hotel", "Shinkansen"]),
    ("marathon training", ["long run", "tempo run", "knee pain", "coach Marta", "race pace"]),
    (
        "Postgres migration",
        ["partitioning", "VACUUM", "index on orders", "replica lag", "pgbouncer"],
    ),
    ("family budget", ["mortgage", "savings rate", "daycare costs", "index funds", "car loan"]),
    ("garden", ["tomatoes", "drip irrigation", "compost", "raised beds", "aphids"]),
    ("job search", ["interview", "salary offer", "recruiter", "portfolio", "notice period"]),
    ("home network", ["mesh wifi", "VLAN", "router firmware", "NAS backup", "port forwarding"]),
]


def _turn_text(rng: random.Random, subject: str, things: list[str], role: str, n: int) -> str:
    """About 240 tokens of plausible text about one subject."""
    sentences = []
    while len(" ".join(sentences)) < 1_000:
        thing = rng.choice(things)
        amount = rng.randint(2, 9_000)
        sentences.append(
            rng.choice(
                [
                    f"For the {subject}, the {thing} came to ${amount:,} in the end.",
                    f"I decided to change the {thing} plan after talking to Alex on day {n}.",
                    f"The {thing} needs about {amount % 40 + 2} hours of work next week.",
                    f"We compared three options for the {thing} and picked the second one.",
                    f"My main worry about the {thing} is the schedule, not the {subject} itself.",
                    f"Note {n}: the {thing} is now scheduled for {rng.choice(['May', 'June', 'July'])} {amount % 28 + 1}.",
                ]
            )
        )
    prefix = "Here is what I suggest. " if role == "assistant" else ""
    return prefix + " ".join(sentences)


def _history(turns: int, seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    subject, things = rng.choice(SUBJECTS)
    for n in range(turns):
        if n % 12 == 0:  # topics come and go
            subject, things = rng.choice(SUBJECTS)
        role = "user" if n % 2 == 0 else "assistant"
        out.append((role, _turn_text(rng, subject, things, role, n)))
    return out


def run(turns: int = 500, ceiling: int = 16_000) -> dict[str, Any]:
    user = get_user_model().objects.create_user(f"vc-bench-{uuid.uuid4().hex[:8]}")
    try:
        return _run(user, turns, ceiling)
    finally:
        user.delete()


def _run(user: Any, turns: int, ceiling: int) -> dict[str, Any]:
    account = account_for_user(user)
    account.context_ceiling = ceiling
    account.save()
    history = _history(turns)
    t0 = time.perf_counter()
    model = embedder()
    model.encode(["warm up"])
    load_s = time.perf_counter() - t0
    conversation = Conversation.objects.create(
        account=account, format="anthropic", model="claude-sonnet-4-5"
    )
    t1 = time.perf_counter()
    Turn.objects.bulk_create(
        [
            Turn(
                conversation=conversation,
                position=i,
                role=role,
                content={"role": role, "content": text},
                text=text,
                content_hash=hashlib.blake2b(f"{i}{text}".encode(), digest_size=16).hexdigest(),
            )
            for i, (role, text) in enumerate(history)
        ]
    )
    store_s = time.perf_counter() - t1
    job = MemoryJob.objects.create(conversation=conversation, kind=jobs.PROCESS)
    t2 = time.perf_counter()
    pipeline.conversation_process(job_id=job.pk)
    process_s = time.perf_counter() - t2
    job.refresh_from_db()
    conversation.refresh_from_db()
    return {
        "turns": turns,
        "tokens": sum(count_text(t) for _, t in history),
        "embedder": model.model_name,
        "model_load_s": round(load_s, 2),
        "store_s": round(store_s, 2),
        "process_s": round(process_s, 2),
        "job_state": job.state,
        "pending_jobs": jobs.pending_jobs(conversation.pk),
        "segments": Segment.objects.filter(conversation=conversation).count(),
        "tag_summaries": TagSummary.objects.filter(conversation=conversation).count(),
        "tags": Tag.objects.filter(conversation=conversation).count(),
        "watermark": conversation.watermark,
        "ok": job.state == JobState.DONE,
    }
