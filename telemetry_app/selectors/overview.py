"""The overview: KPI cards, the usage chart's buckets and the newest requests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from memory_app.models import Conversation
from telemetry_app.models import RequestLog, Rollup
from telemetry_app.selectors.common import Savings, proxy_sums, savings_of
from vcloud.accounts.models import Account

RECENT_REQUESTS = 50


@dataclass(slots=True)
class Kpi:
    label: str
    totals: Savings
    active_sessions: int


KPI_WINDOWS = (("today", "Today", 0), ("week", "7 days", 6), ("month", "30 days", 29))


def overview_kpis(*, account: Account, now: datetime | None = None) -> list[Kpi]:
    """Requests, tokens, saving and active sessions for today, 7 and 30 days."""
    today = datetime.combine((now or timezone.now()).astimezone(UTC).date(), time.min, UTC)
    starts = {name: today - timedelta(days=back) for name, _, back in KPI_WINDOWS}
    earliest = min(starts.values())
    sums: dict[str, Any] = {}
    active: dict[str, Any] = {}
    for name, start in starts.items():
        sums.update(proxy_sums(Q(hour__gte=start), prefix=f"{name}_"))
        active[name] = Count("pk", filter=Q(updated_at__gte=start))
    totals = Rollup.objects.filter(account=account, hour__gte=earliest).aggregate(**sums)
    sessions = Conversation.objects.filter(account=account, updated_at__gte=earliest).aggregate(
        **active
    )
    return [
        Kpi(label, savings_of(label, totals, f"{name}_"), sessions[name] or 0)
        for name, label, _ in KPI_WINDOWS
    ]


CHART_SPANS = {"24h": (24, "hour"), "7d": (7, "day"), "30d": (30, "day")}


def usage_series(
    *, account: Account, span: str, now: datetime | None = None
) -> list[tuple[datetime, Savings]]:
    """Buckets (hours or days, oldest first, empty ones included) of the span."""
    count, unit = CHART_SPANS.get(span, CHART_SPANS["24h"])
    now = (now or timezone.now()).astimezone(UTC)
    if unit == "hour":
        last = now.replace(minute=0, second=0, microsecond=0)
        step = timedelta(hours=1)
    else:
        last = datetime.combine(now.date(), time.min, UTC)
        step = timedelta(days=1)
    first = last - step * (count - 1)
    buckets = {first + step * n: Savings("") for n in range(count)}
    rows = (
        Rollup.objects.filter(account=account, hour__gte=first)
        .values("hour")
        .annotate(**proxy_sums())
        .order_by()
    )
    for row in rows:
        hour = row["hour"].astimezone(UTC)
        start = hour if unit == "hour" else datetime.combine(hour.date(), time.min, UTC)
        if start in buckets:
            buckets[start].add(savings_of("", row))
    return list(buckets.items())


def requests_recent(*, account: Account, limit: int = RECENT_REQUESTS) -> list[RequestLog]:
    return list(
        RequestLog.objects.filter(account=account)
        .select_related("conversation")
        .order_by("-created_at")[:limit]
    )
