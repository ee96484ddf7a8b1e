from __future__ import annotations

from decimal import Decimal

import pytest

from telemetry_app.models import ModelPrice
from telemetry_app.pricing import call_cost, price_catalog_reset, price_lookup

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_catalog():
    price_catalog_reset()
    yield
    price_catalog_reset()


def test_catalog_is_seeded_for_the_three_providers():
    providers = set(ModelPrice.objects.values_list("provider", flat=True))
    assert {"anthropic", "openai", "gemini"} <= providers


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-2099-01-01", "gpt-4o"),
        ("models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
    ],
)
def test_price_lookup_matches_provider_spellings(name, model):
    price = price_lookup(name)
    assert price is not None
    assert price.model == model


def test_unknown_model_has_no_price():
    assert price_lookup("my-local-llama") is None
    assert call_cost(None, input_tokens=10, output_tokens=10) == 0


def test_cost_counts_cache_reads_and_writes_at_their_prices():
    price = price_lookup("claude-sonnet-4-5")
    cost = call_cost(
        price,
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=600_000,
        cache_write_tokens=200_000,
    )
    # 200k plain × $3 + 600k × $0.30 + 200k × $3.75 + 100k × $15, per million.
    assert cost == Decimal("0.6") + Decimal("0.18") + Decimal("0.75") + Decimal("1.5")
