"""Cost of an LLM call from the price catalog.

``price_lookup(model)`` finds the catalog row for a model name the way
providers spell them: exact name, then an alias, then the longest catalog name
that prefixes it ("gpt-4o-2024-08-06" → "gpt-4o", "models/gemini-2.5-flash" →
"gemini-2.5-flash"). The catalog is read once per process and re-read when it
changes here (``price_catalog_reset``) or, for edits made by another process
(admin, ``price_catalog_load``), after ``CATALOG_TTL`` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

PRICES_FILE = Path(__file__).parent / "data" / "prices.json"
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Price:
    model: str
    provider: str
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    context_window: int


CATALOG_TTL = 60.0

_catalog: dict[str, Price] | None = None
_loaded_at = 0.0
_lock = threading.Lock()


def _load_catalog() -> dict[str, Price]:
    from telemetry_app.models import ModelPrice

    catalog: dict[str, Price] = {}
    # Oldest first, so the newest effective row of each name wins.
    for row in ModelPrice.objects.filter(effective_date__lte=date.today()).order_by(
        "effective_date"
    ):
        price = Price(
            row.model,
            row.provider,
            row.input_price,
            row.output_price,
            row.cache_read_price,
            row.cache_write_price,
            row.context_window,
        )
        for name in [row.model, *row.aliases]:
            catalog[name.lower()] = price
    return catalog


def price_catalog_reset() -> None:
    global _catalog
    with _lock:
        _catalog = None


def price_lookup(model: str) -> Price | None:
    global _catalog, _loaded_at
    if _catalog is None or time.monotonic() - _loaded_at > CATALOG_TTL:
        with _lock:
            if _catalog is None or time.monotonic() - _loaded_at > CATALOG_TTL:
                _catalog = _load_catalog()
                _loaded_at = time.monotonic()
    name = model.lower().removeprefix("models/")
    if name in _catalog:
        return _catalog[name]
    best = max((k for k in _catalog if name.startswith(k)), key=len, default=None)
    return _catalog[best] if best else None


def call_cost(
    price: Price | None,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Decimal:
    """USD for one call; ``input_tokens`` includes the cached and cache-written parts."""
    if price is None:
        return Decimal(0)
    plain = max(input_tokens - cache_read_tokens - cache_write_tokens, 0)
    total = (
        plain * price.input
        + cache_read_tokens * price.cache_read
        + cache_write_tokens * price.cache_write
        + output_tokens * price.output
    )
    return total / _MILLION


def price_rows_from_file(path: Path = PRICES_FILE) -> list[dict[str, object]]:
    """The catalog file as ModelPrice field dicts."""
    data = json.loads(path.read_text())
    effective = date.fromisoformat(data["effective_date"])
    return [
        {
            "model": entry["model"],
            "provider": entry["provider"],
            "aliases": entry.get("aliases", []),
            "context_window": entry.get("context_window", 0),
            "input_price": Decimal(str(entry["input"])),
            "output_price": Decimal(str(entry["output"])),
            "cache_read_price": Decimal(str(entry["cache_read"])),
            "cache_write_price": Decimal(str(entry["cache_write"])),
            "effective_date": date.fromisoformat(entry.get("effective_date", str(effective))),
        }
        for entry in data["models"]
    ]
