"""Telemetry writes: the price catalog."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from telemetry_app.models import ModelPrice
from telemetry_app.pricing import PRICES_FILE, price_catalog_reset, price_rows_from_file


@transaction.atomic
def price_catalog_load(*, path: Path = PRICES_FILE) -> int:
    """Insert or update the catalog rows of a prices file; returns how many."""
    rows = price_rows_from_file(path)
    for row in rows:
        ModelPrice.objects.update_or_create(
            model=row["model"], effective_date=row["effective_date"], defaults=row
        )
    transaction.on_commit(price_catalog_reset)
    return len(rows)
