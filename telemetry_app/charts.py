"""Geometry of the overview's usage chart, drawn as inline SVG by the template.

Pure: buckets in, coordinates out. Each bucket is a pair of bars (tokens the
clients sent, tokens sent upstream) on the left axis and two lines (what the
requests cost with vcloud, our own LLM calls included, and the baseline of
sending the full history) on the right axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Protocol

WIDTH, HEIGHT = 1200, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 64, 14, 30
TICKS = 4
X_LABELS = 8


class Bucket(Protocol):
    client_tokens: int
    upstream_tokens: int
    cost: Decimal
    own_cost: Decimal
    baseline_cost: Decimal


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    upstream_x: float
    width: float
    client_y: float
    client_h: float
    upstream_y: float
    upstream_h: float
    title: str


@dataclass(slots=True)
class UsageChart:
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    bars: list[Bar] = field(default_factory=list)
    cost_points: str = ""
    baseline_points: str = ""
    token_ticks: list[tuple[float, str]] = field(default_factory=list)
    cost_ticks: list[tuple[float, str]] = field(default_factory=list)
    x_labels: list[tuple[float, str]] = field(default_factory=list)
    empty: bool = True


def nice_ceiling(value: float) -> float:
    """The smallest 1/2/2.5/5 × 10^n at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 2.5, 5, 10) if value <= m * scale * (1 + 1e-9))


def compact(value: float) -> str:
    """Three significant digits and a unit: 2287500 → 2.29M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if abs(value) >= limit or limit == 1:
            text = f"{value / limit:.3g}"
            return (text if "e" not in text else f"{value / limit:.0f}") + suffix
    raise AssertionError("unreachable")


def money(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.3g}"


def usage_chart(series: list[tuple[datetime, Bucket]], *, hourly: bool) -> UsageChart:
    chart = UsageChart()
    if not series:
        return chart
    tokens_max = nice_ceiling(max(max(b.client_tokens, b.upstream_tokens) for _, b in series))
    cost_max = nice_ceiling(
        float(max(max(b.cost + b.own_cost, b.baseline_cost) for _, b in series))
    )
    chart.empty = not any(b.client_tokens or b.upstream_tokens or b.cost for _, b in series)
    height = chart.bottom - chart.top
    slot = (chart.right - chart.left) / len(series)
    bar = max(slot * 0.36, 1.0)
    cost, baseline = [], []
    for n, (start, b) in enumerate(series):
        x = chart.left + n * slot
        client_h = height * b.client_tokens / tokens_max
        upstream_h = height * b.upstream_tokens / tokens_max
        label = f"{start:%b %d %H:00}" if hourly else f"{start:%b %d}"
        title = (
            f"{label}: {b.client_tokens:,} tokens sent by clients, {b.upstream_tokens:,} "
            f"upstream; cost ${b.cost + b.own_cost:.4f}, baseline ${b.baseline_cost:.4f}"
        )
        chart.bars.append(
            Bar(
                round(x + slot * 0.12, 2),
                round(x + slot * 0.12 + bar, 2),
                round(bar, 2),
                round(chart.bottom - client_h, 2),
                round(client_h, 2),
                round(chart.bottom - upstream_h, 2),
                round(upstream_h, 2),
                title,
            )
        )
        middle = round(x + slot / 2, 2)
        cost.append(f"{middle},{_y(chart, float(b.cost + b.own_cost), cost_max)}")
        baseline.append(f"{middle},{_y(chart, float(b.baseline_cost), cost_max)}")
    chart.cost_points, chart.baseline_points = " ".join(cost), " ".join(baseline)
    _axes(chart, series, tokens_max, cost_max, hourly)
    return chart


def _y(chart: UsageChart, value: float, top_value: float) -> float:
    return round(chart.bottom - (chart.bottom - chart.top) * value / top_value, 2)


def _axes(
    chart: UsageChart,
    series: list[tuple[datetime, Bucket]],
    tokens_max: float,
    cost_max: float,
    hourly: bool,
) -> None:
    for n in range(TICKS + 1):
        share = n / TICKS
        y = round(chart.bottom - (chart.bottom - chart.top) * share, 2)
        chart.token_ticks.append((y, compact(tokens_max * share)))
        chart.cost_ticks.append((y, money(cost_max * share)))
    slot = (chart.right - chart.left) / len(series)
    step = max(1, math.ceil(len(series) / X_LABELS))
    for n in range(0, len(series), step):
        start = series[n][0]
        label = f"{start:%H:00}" if hourly else f"{start:%b %d}"
        chart.x_labels.append((round(chart.left + n * slot + slot / 2, 2), label))
