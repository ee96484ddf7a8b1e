"""Fast multi-row INSERT for the background writer.

``bulk_insert(model, rows)`` writes plain dicts (field name → value) with one
``executemany``, preparing each value with the field's own
``get_db_prep_save`` (so JSON, decimals and datetimes are stored exactly as the
ORM stores them) but without building model instances: at gateway rates the
ORM's ``bulk_create`` costs more CPU than the request it records. No signals,
no ``auto_now``: callers pass every value.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.db import connection, models


@cache
def _plan(
    model: type[models.Model], names: tuple[str, ...]
) -> tuple[str, list[Callable[..., Any]]]:
    meta = model._meta
    fields = [meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)  # type: ignore[union-attr]
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
    return sql, [f.get_db_prep_save for f in fields]  # type: ignore[union-attr]


def bulk_insert(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    names = tuple(rows[0])
    sql, preps = _plan(model, names)
    params = [
        tuple(prep(row[name], connection) for prep, name in zip(preps, names, strict=True))
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
