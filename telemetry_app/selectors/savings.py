"""Cost and savings per day, model, key and session over a date range, and the
same numbers as CSV rows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet, Sum

from telemetry_app.models import Rollup, SessionRollup
from telemetry_app.selectors.common import (
    PROXY,
    SUM,
    ZERO,
    DateRange,
    Savings,
    proxy_sums,
    savings_of,
)
from vcloud.accounts.models import Account

SAVINGS_SESSIONS_PER_PAGE = 20


@dataclass(slots=True)
class SavingsReport:
    range: DateRange
    total: Savings
    by_day: list[Savings]
    by_model: list[Savings]
    by_key: list[Savings]
    sessions: Page | None = None
    # vcloud's own LLM calls that belong to no conversation (a row of the session table)
    own_without_session: Savings = field(default_factory=lambda: Savings(""))


OWN_CALLS_LABEL = "vcloud's own LLM calls"


def savings_report(
    *, account: Account, dates: DateRange, session_page: Any = 1, all_sessions: bool = False
) -> SavingsReport:
    """Actual vs baseline cost per day, model, key and session over ``dates``."""
    rollups = Rollup.objects.filter(account=account, hour__gte=dates.since, hour__lt=dates.until)
    by_day = _savings_by_day(rollups)
    total = Savings(f"{dates.start} – {dates.end}")
    for day in by_day:
        total.add(day)
    own = Savings(OWN_CALLS_LABEL, own_cost=total.own_cost)
    by_model = [
        savings_of(row["model"] or "(no model)", row, ref=row["model"])
        for row in rollups.filter(component=PROXY)
        .values("model")
        .annotate(**proxy_sums())
        .order_by(f"-{SUM}baseline_cost", "model")
    ]
    keys = (
        rollups.filter(component=PROXY)
        .values("vckey_id", "vckey__name", "vckey__prefix")
        .annotate(**proxy_sums())
        .order_by(f"-{SUM}baseline_cost", "vckey_id")
    )
    by_key = [savings_of(_key_label(row), row, ref=row["vckey_id"]) for row in keys]
    extra = [own] if own.own_cost else []
    report = SavingsReport(dates, total, by_day, by_model + extra, by_key + extra)
    _session_savings(account, dates, report, session_page, all_sessions)
    return report


def _key_label(row: dict[str, Any]) -> str:
    if row["vckey_id"] is None:
        return "(deleted key)"
    return f"{row['vckey__name']} ({row['vckey__prefix']}…)"


def _savings_by_day(rollups: QuerySet[Rollup]) -> list[Savings]:
    """Days with any traffic or own LLM calls, newest first."""
    days: dict[date, Savings] = {}
    for row in rollups.values("hour").annotate(**proxy_sums()).order_by("-hour"):
        day = row["hour"].astimezone(UTC).date()
        days.setdefault(day, Savings(day.isoformat(), ref=day)).add(savings_of("", row))
    return list(days.values())


def _session_savings(
    account: Account, dates: DateRange, report: SavingsReport, page: Any, everything: bool
) -> None:
    rows = (
        SessionRollup.objects.filter(account=account, day__gte=dates.start, day__lte=dates.end)
        .values("conversation_id", "conversation__title", "conversation__session_id")
        .annotate(
            **{
                SUM + name: Sum(name)
                for name in (
                    "requests",
                    "client_tokens",
                    "upstream_tokens",
                    "cost",
                    "baseline_cost",
                    "own_cost",
                )
            },
            saving=Sum("baseline_cost") - Sum("cost") - Sum("own_cost"),
        )
        .order_by("-saving", "-conversation_id")
    )
    per_page = 10**9 if everything else SAVINGS_SESSIONS_PER_PAGE
    result = Paginator(rows, per_page).get_page(page)
    result.object_list = [_session_row(row) for row in result.object_list]
    report.sessions = result
    attributed = (
        SessionRollup.objects.filter(
            account=account, day__gte=dates.start, day__lte=dates.end
        ).aggregate(own=Sum("own_cost"))["own"]
        or ZERO
    )
    unattributed = report.total.own_cost - attributed
    report.own_without_session = Savings(
        f"{OWN_CALLS_LABEL} outside any session", own_cost=unattributed
    )


def _session_row(row: dict[str, Any]) -> Savings:
    label = row["conversation__title"] or row["conversation__session_id"]
    return savings_of(
        label or f"conversation {row['conversation_id']}", row, ref=row["conversation_id"]
    )


def savings_csv_rows(report: SavingsReport) -> Iterator[list[object]]:
    """The report as CSV rows: the same slices and numbers as the page."""
    yield [
        "breakdown",
        "label",
        "requests",
        "client_tokens",
        "upstream_tokens",
        "actual_cost_usd",
        "baseline_cost_usd",
        "own_llm_cost_usd",
        "net_saving_usd",
    ]
    sections: list[tuple[str, Iterable[Savings]]] = [
        ("total", [report.total]),
        ("day", report.by_day),
        ("model", report.by_model),
        ("key", report.by_key),
        ("session", [*(report.sessions or []), *_own_row(report)]),
    ]
    for name, rows in sections:
        for s in rows:
            yield [
                name,
                s.label,
                s.requests,
                s.client_tokens,
                s.upstream_tokens,
                s.cost,
                s.baseline_cost,
                s.own_cost,
                s.saving,
            ]


def _own_row(report: SavingsReport) -> list[Savings]:
    """The session table's last row, when some own LLM calls belong to no session."""
    return [report.own_without_session] if report.own_without_session.own_cost else []
