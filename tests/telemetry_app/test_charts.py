"""The usage chart's geometry and the dashboard's number formats (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from telemetry_app.charts import compact, nice_ceiling, usage_chart
from telemetry_app.selectors import Savings
from telemetry_app.templatetags.dashboard import ms, reduction, usd

START = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (0.7, 1), (1.2, 2), (2.1, 2.5), (3, 5), (7, 10), (130, 200)]
)
def test_nice_ceiling_rounds_up_to_a_readable_axis(value, ceiling):
    assert nice_ceiling(value) == pytest.approx(ceiling)


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (950, "950"), (1234, "1.23k"), (2_287_500, "2.29M"), (999.9, "1000"), (3e9, "3G")],
)
def test_compact_numbers(value, text):
    assert compact(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"),
        (Decimal(0), "$0.00"),
        (Decimal("0.0045"), "$0.0045"),
        (Decimal("0.000006"), "$0.000006"),
        (Decimal("12.346"), "$12.35"),
        (Decimal("1234.5"), "$1,234"),
        (Decimal("-0.5"), "−$0.5000"),
    ],
)
def test_money_keeps_small_costs_apart(value, text):
    assert usd(value) == text


def test_milliseconds_and_reductions():
    assert (ms(None), ms(1.234), ms(1234.5)) == ("—", "1.2 ms", "1,234 ms")
    assert (reduction(None), reduction(0.2), reduction(42.4), reduction(-3)) == (
        "",
        "",
        "−42%",
        "+3%",
    )


def test_chart_bars_and_lines_stay_inside_the_plot():
    series = [
        (
            START + timedelta(hours=n),
            Savings("", client_tokens=1000 * n, upstream_tokens=400 * n,
                    cost=Decimal("0.01") * n, baseline_cost=Decimal("0.03") * n),
        )
        for n in range(24)
    ]  # fmt: skip
    chart = usage_chart(series, hourly=True)
    assert not chart.empty
    assert len(chart.bars) == 24
    tallest = chart.bars[-1]
    assert tallest.client_h > tallest.upstream_h > 0
    for bar in chart.bars:
        assert chart.left <= bar.x < bar.upstream_x + bar.width <= chart.right
        assert chart.top <= bar.client_y <= chart.bottom
    for points in (chart.cost_points, chart.baseline_points):
        ys = [float(p.split(",")[1]) for p in points.split()]
        assert len(ys) == 24
        assert all(chart.top <= y <= chart.bottom for y in ys)
    assert chart.token_ticks[-1][1] == "25k"  # 23,000 tokens round up to a 25k axis
    assert [label for _, label in chart.x_labels][:2] == ["00:00", "03:00"]


def test_a_chart_without_traffic_says_so():
    chart = usage_chart([(START, Savings(""))], hourly=False)
    assert chart.empty
