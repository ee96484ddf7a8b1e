"""Fast multi-row INSERT for the background writer.

``bulk_insert(model, rows)`` writes plain dicts (field name → value, every row
with the same keys in the same order) with one ``executemany``. Values of
fields that need adapting (datetimes, decimals, JSON) go through the field's own
``get_db_prep_save``, so they are stored exactly as the ORM stores them; plain
str/int/float/bool/None go to the driver as they are. No model instances, no
signals, no ``auto_now``: callers pass the values that matter; any other
column gets its field's default (so a new field with a default needs no change
here). At gateway rates the ORM's
``bulk_create`` costs more CPU than the request it records.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

_NATIVE = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
)


@cache
def _plan(
    model: type[models.Model], names: tuple[str, ...]
) -> tuple[str, list[tuple[int, Callable[..., Any]]], list[Any]]:
    meta = model._meta
    given = [meta.get_field(name) for name in names]
    rest = [
        f
        for f in meta.concrete_fields
        if f.name not in names and f.attname not in names and not f.primary_key
    ]
    fields = given + rest
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)  # type: ignore[union-attr]
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
    preps = [
        (i, f.get_db_prep_save)  # type: ignore[union-attr]
        for i, f in enumerate(fields)
        if i < len(given) and not isinstance(f, (*_NATIVE, models.ForeignKey))
    ]
    defaults = [f.get_db_prep_save(f.get_default(), connection) for f in rest]
    return sql, preps, defaults


def bulk_insert(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    sql, preps, defaults = _plan(model, tuple(rows[0]))
    db = connections[DEFAULT_DB_ALIAS]  # the real one, not the per-attribute proxy
    params = []
    for row in rows:
        values = list(row.values())
        for i, prep in preps:
            values[i] = prep(values[i], db)
        params.append(values + defaults)
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
