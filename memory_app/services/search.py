"""Quote search: the stored turns of one conversation that match a text.

``quotes_search`` ranks turns (not summaries) with the retrieval index the
planner uses (BM25 over the stored text and embedding cosine, fused by
reciprocal rank; tags only when the text names them), so what the API and the
``vc_find_quote`` tool find is what the planner would recall. Each hit carries
an excerpt around its best-matching words."""

from __future__ import annotations

import re
from typing import Any

from memory_app.embedding import embedder
from memory_app.engine.retrieval import text_tokens
from memory_app.engine.types import Query
from memory_app.models import Conversation, Turn
from memory_app.services.planning import conversation_index

EXCERPT_CHARS = 300
LIMIT_MAX = 50


def quotes_search(
    *, conversation: Conversation, text: str, limit: int = 10
) -> list[dict[str, Any]]:
    text = text.strip()
    if not text:
        return []
    index, units, _ = conversation_index(conversation)
    if not units:
        return []
    query = Query(text=text, embedding=embedder().encode([text[:2000]])[0])
    limit = max(1, min(limit, LIMIT_MAX))
    hits = [h for h in index.search(query, limit=limit * 4) if h.key.startswith("t:")][:limit]
    positions = [int(h.key[2:]) for h in hits]
    turns = {
        t.position: t
        for t in Turn.objects.filter(
            conversation=conversation, replaced=False, position__in=positions
        )
    }
    words = set(text_tokens(text))
    return [
        {
            "position": turn.position,
            "role": turn.role,
            "session_date": turn.session_date,
            "score": round(float(hit.score), 6),
            "signals": {k: round(float(v), 4) for k, v in hit.signals.items()},
            "excerpt": excerpt(turn.text, words),
        }
        for hit in hits
        if (turn := turns.get(int(hit.key[2:]))) is not None
    ]


def excerpt(text: str, words: set[str], size: int = EXCERPT_CHARS) -> str:
    """About ``size`` characters of ``text`` around its first matching word."""
    if len(text) <= size:
        return text
    start = 0
    for match in re.finditer(r"\w+", text):
        if text_tokens(match.group()) and set(text_tokens(match.group())) & words:
            start = max(0, match.start() - size // 3)
            break
    end = min(len(text), start + size)
    start = max(0, end - size)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
