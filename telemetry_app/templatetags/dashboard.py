"""Number formats of the dashboard: money, milliseconds, shares."""

from __future__ import annotations

from decimal import Decimal

from django import template

from telemetry_app.charts import compact as compact_number

register = template.Library()


@register.filter
def usd(value: Decimal | float | None) -> str:
    """$1,234 / $12.34 / $0.0045 / $0.000006: enough digits to tell small costs apart."""
    if value is None:
        return "—"
    amount = Decimal(value)
    sign = "−" if amount < 0 else ""
    amount = abs(amount)
    if amount >= 100:
        text = f"{amount:,.0f}"
    elif amount >= 1 or amount == 0:
        text = f"{amount:,.2f}"
    elif amount >= Decimal("0.0001"):
        text = f"{amount:.4f}"
    else:
        text = f"{amount:.6f}"
    return f"{sign}${text}"


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


@register.filter
def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


@register.filter
def format_label(value: str) -> str:
    from telemetry_app.forms import FORMAT_LABELS

    return FORMAT_LABELS.get(value, value)


@register.filter
def compact(value: int | float | None) -> str:
    """2,287,500 → 2.29M (the exact figure goes in a title)."""
    return "—" if value is None else compact_number(value)


@register.filter
def reduction(value: float | None) -> str:
    """How much smaller the upstream payloads were: "−42%" (or "+3%" when larger)."""
    if value is None or abs(value) < 0.5:
        return ""
    return f"−{value:.0f}%" if value > 0 else f"+{-value:.0f}%"
