"""What every report shares: UTC date ranges, the ``Savings`` of a slice, and the
rollup aggregates that fill it.

The saving of a set of requests is their baseline cost (the full history the
client sent, same model and cache prices) minus what they cost, minus what
vcloud's own LLM calls (tagging, compaction, …) cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum
from django.utils import timezone

from telemetry_app.models import Component

PROXY = Component.PROXY_UPSTREAM.value
ZERO = Decimal(0)


def today_utc() -> date:
    return timezone.now().astimezone(UTC).date()


@dataclass(frozen=True, slots=True)
class DateRange:
    start: date  # inclusive
    end: date  # inclusive

    @property
    def since(self) -> datetime:
        return datetime.combine(self.start, time.min, UTC)

    @property
    def until(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time.min, UTC)


@dataclass(slots=True)
class Savings:
    """Requests and costs of one slice (a day, model, key, session or window)."""

    label: str
    requests: int = 0
    client_tokens: int = 0
    upstream_tokens: int = 0
    cost: Decimal = ZERO
    baseline_cost: Decimal = ZERO
    own_cost: Decimal = ZERO
    ref: Any = None  # what the label names: a date, key id, conversation id

    @property
    def saving(self) -> Decimal:
        return self.baseline_cost - self.cost - self.own_cost

    @property
    def saving_pct(self) -> float | None:
        return float(self.saving / self.baseline_cost * 100) if self.baseline_cost else None

    @property
    def token_reduction_pct(self) -> float | None:
        if not self.client_tokens:
            return None
        return (1 - self.upstream_tokens / self.client_tokens) * 100

    def add(self, other: Savings) -> None:
        self.requests += other.requests
        self.client_tokens += other.client_tokens
        self.upstream_tokens += other.upstream_tokens
        self.cost += other.cost
        self.baseline_cost += other.baseline_cost
        self.own_cost += other.own_cost


SUM = "sum_"  # prefix of aggregate names (they may not shadow the model's fields)


def proxy_sums(extra: Q | None = None, prefix: str = SUM) -> dict[str, Sum]:
    """Aggregates of rollup rows into ``Savings`` fields (own = other components)."""
    proxy = Q(component=PROXY) & (extra or Q())
    own = ~Q(component=PROXY) & (extra or Q())
    return {
        f"{prefix}requests": Sum("requests", filter=proxy),
        f"{prefix}client_tokens": Sum("client_tokens", filter=proxy),
        f"{prefix}upstream_tokens": Sum("upstream_tokens", filter=proxy),
        f"{prefix}cost": Sum("cost", filter=proxy),
        f"{prefix}baseline_cost": Sum("baseline_cost", filter=proxy),
        f"{prefix}own_cost": Sum("cost", filter=own),
    }


def savings_of(label: str, row: dict[str, Any], prefix: str = SUM, ref: Any = None) -> Savings:
    def value(name: str, zero: Any) -> Any:
        return row.get(prefix + name) or zero

    return Savings(
        label,
        requests=value("requests", 0),
        client_tokens=value("client_tokens", 0),
        upstream_tokens=value("upstream_tokens", 0),
        cost=value("cost", ZERO),
        baseline_cost=value("baseline_cost", ZERO),
        own_cost=value("own_cost", ZERO),
        ref=ref,
    )
