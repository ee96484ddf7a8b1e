"""The telemetry page: the ledger per component and the recent LLM calls."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Sum

from telemetry_app.models import LLMCall, Rollup
from telemetry_app.selectors.common import PROXY, ZERO, DateRange
from vcloud.accounts.models import Account

CALLS_PER_PAGE = 50
LATENCY_SAMPLE = 1000  # latest calls of a component in the range behind p50/p95


@dataclass(slots=True)
class ComponentStats:
    component: str
    requests: int
    calls: int
    errors: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: Decimal
    mean_ms: float | None
    overhead_ms: float | None
    p50_ms: float | None = None
    p95_ms: float | None = None
    sampled: int = 0


def components_ledger(*, account: Account, dates: DateRange) -> list[ComponentStats]:
    """Per-component totals from the rollups; p50/p95 over the latest calls."""
    rows = (
        Rollup.objects.filter(account=account, hour__gte=dates.since, hour__lt=dates.until)
        .values("component")
        .annotate(
            requests_=Sum("requests"),
            calls_=Sum("calls"),
            errors_=Sum("errors"),
            input_=Sum("upstream_tokens"),
            cached_=Sum("cached_tokens"),
            output_=Sum("output_tokens"),
            cost_=Sum("cost"),
            duration_=Sum("duration_ms"),
            overhead_=Sum("overhead_ms"),
        )
        .order_by("component")
    )
    stats = [_component(row) for row in rows]
    for s in stats:
        _latency(account, dates, s)
    return stats


def _component(row: dict[str, Any]) -> ComponentStats:
    proxy = row["component"] == PROXY
    count = (row["requests_"] if proxy else row["calls_"]) or 0
    return ComponentStats(
        component=row["component"],
        requests=row["requests_"] or 0,
        calls=row["calls_"] or 0,
        errors=row["errors_"] or 0,
        input_tokens=row["input_"] or 0,
        cached_tokens=row["cached_"] or 0,
        output_tokens=row["output_"] or 0,
        cost=row["cost_"] or ZERO,
        mean_ms=(row["duration_"] or 0) / count if count else None,
        overhead_ms=(row["overhead_"] or 0) / count if proxy and count else None,
    )


def _latency(account: Account, dates: DateRange, stats: ComponentStats) -> None:
    durations = list(
        LLMCall.objects.filter(
            account=account,
            component=stats.component,
            created_at__gte=dates.since,
            created_at__lt=dates.until,
        )
        .order_by("-created_at")
        .values_list("duration_ms", flat=True)[:LATENCY_SAMPLE]
    )
    stats.sampled = len(durations)
    if len(durations) == 1:
        stats.p50_ms = stats.p95_ms = durations[0]
    elif durations:
        cuts = statistics.quantiles(durations, n=100, method="inclusive")
        stats.p50_ms, stats.p95_ms = cuts[49], cuts[94]


def llm_calls_page(*, account: Account, dates: DateRange, page: Any) -> Page:
    calls = (
        LLMCall.objects.filter(
            account=account, created_at__gte=dates.since, created_at__lt=dates.until
        )
        .select_related("conversation")
        .order_by("-created_at", "-pk")
    )
    return Paginator(calls, CALLS_PER_PAGE).get_page(page)
