"""One session's page: its turns, requests, the context window of a request
(``context_window``), segments and tag summaries with their depth in the
working set, facts, and the background jobs.

``session_detail`` is the page's one call. The conversation is looked up by
account first (another account's id is ``None``, never a row); everything else
is filtered by that conversation. Each list is one page of rows with its
relations joined or prefetched, so the page takes the same number of queries
whatever the conversation's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, Q
from django.db.models.functions import Length, Substr

from memory_app.models import (
    Conversation,
    Fact,
    FactLink,
    MemoryJob,
    RequestContext,
    Segment,
    Tag,
    TagSummary,
    Turn,
    TurnTag,
)
from telemetry_app.models import RequestLog
from telemetry_app.selectors.context_window import (
    ContextView,
    WorkingSet,
    request_context_view,
    working_set_latest,
)
from telemetry_app.selectors.sessions import conversation_for_account, pending_jobs_by_conversation
from vcloud.accounts.models import Account

TURNS_PER_PAGE = 50
REQUESTS_PER_PAGE = 25
SEGMENTS_PER_PAGE = 20
SUMMARIES_PER_PAGE = 20
FACTS_PER_PAGE = 25
JOBS_SHOWN = 5
TURN_TEXT_SHOWN = 20_000  # characters of a turn the timeline expands to


def _page_number(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and int(value) > 0 else None


@dataclass(frozen=True, slots=True)
class SessionParams:
    """What the page's query string asks for (bad values fall back to defaults)."""

    turns_page: int | None = None  # None: the newest page
    at: int | None = None  # a turn position: the timeline page holding it
    requests_page: int | None = None
    request_id: str = ""  # the request whose context window is shown
    segments_page: int | None = None
    summaries_page: int | None = None
    facts_page: int | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> SessionParams:
        at = query.get("at", "")
        return cls(
            turns_page=_page_number(query.get("turns")),
            at=int(at) if at.isdigit() else None,
            requests_page=_page_number(query.get("requests")),
            request_id=query.get("request", "").strip()[:40],
            segments_page=_page_number(query.get("segments")),
            summaries_page=_page_number(query.get("summaries")),
            facts_page=_page_number(query.get("facts")),
        )


# --------------------------------------------------------------------- lists


def session_turns_page(
    *, conversation: Conversation, page: int | None = None, at: int | None = None
) -> Page:
    """A page of the active turns in position order (the newest page by default,
    or the one holding position ``at``), each with its tags (primary first),
    ``compacted``, and at most ``TURN_TEXT_SHOWN`` characters of ``text_head``."""
    turns = Turn.objects.filter(conversation=conversation, replaced=False)
    tags = TurnTag.objects.select_related("tag").order_by("related", "-weight", "tag__name")
    rows = (
        turns.only("id", "position", "role", "session_date", "token_count")
        .annotate(text_head=Substr("text", 1, TURN_TEXT_SHOWN), text_length=Length("text"))
        .prefetch_related(Prefetch("turn_tags", queryset=tags))
        .order_by("position", "id")
    )
    paginator = Paginator(rows, TURNS_PER_PAGE)
    if at is not None:
        page = turns.filter(position__lt=at).count() // TURNS_PER_PAGE + 1
    result = paginator.get_page(page or paginator.num_pages)
    result.object_list = list(result.object_list)
    for turn in result.object_list:
        turn.compacted = turn.position < conversation.watermark
    return result


def session_requests_page(*, conversation: Conversation, page: int | None = None) -> Page:
    """A page of the conversation's requests, newest first, each with
    ``context_state``: "planned", "as sent" (recorded, not planned) or ""."""
    rows = RequestLog.objects.filter(
        account_id=conversation.account_id, conversation=conversation
    ).order_by("-created_at", "-pk")
    result = Paginator(rows, REQUESTS_PER_PAGE).get_page(page)
    result.object_list = list(result.object_list)
    found = dict(
        RequestContext.objects.filter(
            conversation=conversation, request_id__in=[r.request_id for r in result.object_list]
        ).values_list("request_id", "planned")
    )
    for request in result.object_list:
        planned = found.get(request.request_id)
        request.context_state = "" if planned is None else ("planned" if planned else "as sent")
    return result


def session_segments_page(
    *, conversation: Conversation, working: WorkingSet, page: int | None = None
) -> Page:
    rows = (
        Segment.objects.filter(conversation=conversation)
        .defer("full_text", "embedding")
        .prefetch_related(Prefetch("tags", queryset=Tag.objects.only("id", "name")))
        .order_by("start_position", "pk")
    )
    result = Paginator(rows, SEGMENTS_PER_PAGE).get_page(page)
    result.object_list = list(result.object_list)
    for segment in result.object_list:
        segment.depth = working.segment_depth(segment)
    return result


def session_summaries_page(
    *, conversation: Conversation, working: WorkingSet, page: int | None = None
) -> Page:
    rows = (
        TagSummary.objects.filter(conversation=conversation)
        .defer("embedding")
        .select_related("tag")
        .order_by("tag__name", "pk")
    )
    result = Paginator(rows, SUMMARIES_PER_PAGE).get_page(page)
    result.object_list = list(result.object_list)
    for summary in result.object_list:
        summary.depth = working.summary_depth(summary)
    return result


def session_facts_page(*, conversation: Conversation, page: int | None = None) -> Page:
    """A page of facts, each with ``chain`` (the facts that superseded it, in
    order) and ``link_rows`` (link type, "→"/"←", the other fact)."""
    rows = (
        Fact.objects.filter(conversation=conversation)
        .select_related("superseded_by")
        .prefetch_related(
            Prefetch("tags", queryset=Tag.objects.only("id", "name")),
            Prefetch("turns", queryset=Turn.objects.only("id", "position")),
        )
        .order_by("-created_at", "-pk")
    )
    result = Paginator(rows, FACTS_PER_PAGE).get_page(page)
    facts = list(result.object_list)
    if facts:
        _facts_chain(conversation, facts)
        _facts_links(conversation, facts)
    result.object_list = facts
    return result


def _facts_chain(conversation: Conversation, facts: list[Fact]) -> None:
    """Supersession chains, from the facts that supersede something (one query)."""
    successors = {
        f.pk: f
        for f in Fact.objects.filter(conversation=conversation, supersedes__isnull=False)
        .only("id", "what", "status", "superseded_by_id", "mentioned_at", "valid_from")
        .distinct()
    }
    for fact in facts:
        chain: list[Fact] = []
        seen = {fact.pk}
        next_id = fact.superseded_by_id
        while next_id is not None and next_id not in seen and next_id in successors:
            seen.add(next_id)
            chain.append(successors[next_id])
            next_id = successors[next_id].superseded_by_id
        fact.chain = chain


def _facts_links(conversation: Conversation, facts: list[Fact]) -> None:
    ids = [f.pk for f in facts]
    links = (
        FactLink.objects.filter(conversation=conversation)
        .filter(Q(source_id__in=ids) | Q(target_id__in=ids))
        .select_related("source", "target")
        .order_by("pk")
    )
    rows: dict[int, list[tuple[str, str, Fact]]] = {pk: [] for pk in ids}
    for link in links:
        if link.source_id in rows:
            rows[link.source_id].append((link.get_link_type_display(), "→", link.target))
        if link.target_id in rows:
            rows[link.target_id].append((link.get_link_type_display(), "←", link.source))
    for fact in facts:
        fact.link_rows = rows[fact.pk]


def session_jobs(*, conversation: Conversation) -> tuple[list[MemoryJob], int]:
    """The latest memory jobs and how many are pending or running."""
    jobs = MemoryJob.objects.filter(conversation=conversation).order_by("-created_at", "-pk")
    pending = pending_jobs_by_conversation([conversation.pk]).get(conversation.pk, 0)
    return list(jobs[:JOBS_SHOWN]), pending


# ---------------------------------------------------------------------- page


@dataclass(slots=True)
class SessionDetail:
    conversation: Conversation
    turns: Page
    requests: Page
    viewer: ContextView | None
    working: WorkingSet
    segments: Page
    summaries: Page
    facts: Page
    jobs: list[MemoryJob]
    pending_jobs: int

    @property
    def token_reduction_pct(self) -> float | None:
        c = self.conversation
        return (1 - c.upstream_tokens / c.client_tokens) * 100 if c.client_tokens else None


def session_detail(
    *, account: Account, conversation_id: int, params: SessionParams
) -> SessionDetail | None:
    """Everything the session page shows; ``None`` when the conversation (or the
    request asked for) is not the account's."""
    conversation = conversation_for_account(account=account, conversation_id=conversation_id)
    if conversation is None:
        return None
    viewer = None
    if params.request_id:
        viewer = request_context_view(conversation=conversation, request_id=params.request_id)
        if viewer is None:
            return None
    working = working_set_latest(conversation=conversation)
    jobs, pending = session_jobs(conversation=conversation)
    return SessionDetail(
        conversation=conversation,
        turns=session_turns_page(conversation=conversation, page=params.turns_page, at=params.at),
        requests=session_requests_page(conversation=conversation, page=params.requests_page),
        viewer=viewer,
        working=working,
        segments=session_segments_page(
            conversation=conversation, working=working, page=params.segments_page
        ),
        summaries=session_summaries_page(
            conversation=conversation, working=working, page=params.summaries_page
        ),
        facts=session_facts_page(conversation=conversation, page=params.facts_page),
        jobs=jobs,
        pending_jobs=pending,
    )
