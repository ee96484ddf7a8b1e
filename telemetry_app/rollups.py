"""Rollups, kept as request-log and ledger rows land; the report pages read them.

``rollups_add(requests=…, calls=…)`` takes the dicts the writer bulk-inserts
(``proxy_app.services._request_row`` and ``_ledger_row``; ``ledger_dict(call)``
gives the same shape for one ``LLMCall``) and adds them to their buckets:

- ``Rollup`` (hour × account × key × model × component). A request counts under
  ``proxy_upstream`` with its key: requests, errors, client/upstream/cached/output
  tokens, cost, baseline cost, upstream time (``duration_ms``) and overhead. Its
  ledger row (same ``request_id``) adds only ``calls`` and the cache-write tokens
  the request row does not carry. Any other ledger row is one of vcloud's own LLM
  calls (tagger, compactor, …): calls, tokens, cost and duration, without a key.
- ``SessionRollup`` (UTC day × conversation): the requests' tokens, cost and
  baseline, and the cost of our own calls made for that conversation.

Batched: group in Python, then per table one read of the touched buckets, one
``UPDATE … SET column = column + %s`` executed for all existing buckets in one
``executemany`` (in id order, so concurrent writers lock rows in the same order
and never lose an increment) and one multi-row insert of the new buckets. The
ORM's ``bulk_update`` would build a CASE expression per row and column: about
2 ms of CPU per bucket, which on the writer's path would cost more than the
rows being recorded. Runs in the caller's transaction (or its own).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Q

from proxy_app.bulk import bulk_insert
from telemetry_app.models import Component, LLMCall, Rollup, SessionRollup

PROXY = Component.PROXY_UPSTREAM.value
HOUR_KEY = ("hour", "account_id", "vckey_id", "model", "component")
DAY_KEY = ("day", "account_id", "conversation_id")
_LEDGER_FIELDS = (
    "account_id",
    "conversation_id",
    "request_id",
    "component",
    "model",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost",
    "duration_ms",
    "created_at",
)

_REQUEST_FIELDS = (
    "account_id",
    "vckey_id",
    "conversation_id",
    "request_id",
    "model",
    "status",
    "client_tokens",
    "upstream_tokens",
    "cached_tokens",
    "output_tokens",
    "cost",
    "baseline_cost",
    "overhead_ms",
    "upstream_ms",
    "created_at",
)

Sums = dict[str, Any]


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour a moment falls in: the bucket of a row."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ledger_dict(call: LLMCall) -> dict[str, Any]:
    """A saved ledger row in the shape ``rollups_add`` takes."""
    return {name: getattr(call, name) for name in _LEDGER_FIELDS}


def is_error(status: int) -> bool:
    return status == 0 or status >= 400


def rollups_add(
    *,
    requests: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    rollup: type[models.Model] = Rollup,
    session_rollup: type[models.Model] = SessionRollup,
) -> None:
    """Add request-log and ledger rows to their hourly and per-session buckets.
    (``rollup``/``session_rollup``: the migration's historical models.)"""
    if not requests and not calls:
        return
    hourly = _hourly(requests, calls)
    daily = _daily(requests, calls)
    with transaction.atomic():
        _upsert(rollup, HOUR_KEY, hourly)
        _upsert(session_rollup, DAY_KEY, daily)


def rollups_backfill(
    *,
    request_log: type[models.Model],
    llm_call: type[models.Model],
    rollup: type[models.Model],
    session_rollup: type[models.Model],
    chunk: int = 2000,
) -> None:
    """Add the rows logged before rollups existed (migration 0003), a chunk at a time."""
    for batch in _chunks(request_log, Q(), _REQUEST_FIELDS, chunk):
        ids = [r["request_id"] for r in batch]
        ledger = llm_call._default_manager.filter(component=PROXY, request_id__in=ids)
        calls = list(ledger.values(*_LEDGER_FIELDS))
        rollups_add(requests=batch, calls=calls, rollup=rollup, session_rollup=session_rollup)
    for batch in _chunks(llm_call, ~Q(component=PROXY), _LEDGER_FIELDS, chunk):
        rollups_add(requests=[], calls=batch, rollup=rollup, session_rollup=session_rollup)


def _chunks(
    model: type[models.Model], where: Q, fields: tuple[str, ...], size: int
) -> Iterator[list[dict[str, Any]]]:
    last = 0
    while True:
        rows = list(
            model._default_manager.filter(where, pk__gt=last)
            .order_by("pk")
            .values("pk", *fields)[:size]
        )
        if not rows:
            return
        last = rows[-1]["pk"]
        yield rows


def _zero(model: type[models.Model], names: Iterable[str]) -> Sums:
    """Zero sums typed like their columns (Decimal for money, float for times)."""
    sums: Sums = {}
    for name in names:
        field = model._meta.get_field(name)
        if isinstance(field, models.DecimalField):
            sums[name] = Decimal(0)
        elif isinstance(field, models.FloatField):
            sums[name] = 0.0
        else:
            sums[name] = 0
    return sums


ROLLUP_SUMS = (
    "requests",
    "calls",
    "errors",
    "client_tokens",
    "upstream_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost",
    "baseline_cost",
    "duration_ms",
    "overhead_ms",
)
SESSION_SUMS = (
    "requests",
    "client_tokens",
    "upstream_tokens",
    "cost",
    "baseline_cost",
    "own_calls",
    "own_cost",
)
_REQUEST_TOKENS = ("client_tokens", "upstream_tokens", "cached_tokens", "output_tokens")


def _hourly(requests: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[tuple, Sums]:
    buckets: dict[tuple, Sums] = defaultdict(lambda: _zero(Rollup, ROLLUP_SUMS))
    key_of_request: dict[str, int | None] = {}
    for r in requests:
        key_id = r.get("vckey_id")
        key_of_request[r.get("request_id", "")] = key_id
        row = buckets[(hour_of(r["created_at"]), r["account_id"], key_id, r["model"], PROXY)]
        row["requests"] += 1
        row["errors"] += is_error(r.get("status", 0))
        for name in _REQUEST_TOKENS:
            row[name] += r.get(name, 0)
        row["cost"] += r.get("cost", 0)
        row["baseline_cost"] += r.get("baseline_cost", 0)
        row["duration_ms"] += r.get("upstream_ms", 0)
        row["overhead_ms"] += r.get("overhead_ms", 0)
    for c in calls:
        component = c["component"]
        key_id = key_of_request.get(c.get("request_id", "")) if component == PROXY else None
        row = buckets[(hour_of(c["created_at"]), c["account_id"], key_id, c["model"], component)]
        row["calls"] += 1
        row["cache_write_tokens"] += c.get("cache_write_tokens", 0)
        if component == PROXY:
            continue  # its tokens, cost and time came with the request row
        row["upstream_tokens"] += c.get("input_tokens", 0)
        row["cached_tokens"] += c.get("cached_tokens", 0)
        row["output_tokens"] += c.get("output_tokens", 0)
        row["cost"] += c.get("cost", 0)
        row["duration_ms"] += c.get("duration_ms", 0)
    return buckets


def _daily(requests: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[tuple, Sums]:
    buckets: dict[tuple, Sums] = defaultdict(lambda: _zero(SessionRollup, SESSION_SUMS))
    for r in requests:
        if r.get("conversation_id") is None:
            continue
        row = buckets[(_day(r["created_at"]), r["account_id"], r["conversation_id"])]
        row["requests"] += 1
        row["client_tokens"] += r.get("client_tokens", 0)
        row["upstream_tokens"] += r.get("upstream_tokens", 0)
        row["cost"] += r.get("cost", 0)
        row["baseline_cost"] += r.get("baseline_cost", 0)
    for c in calls:
        if c["component"] == PROXY or c.get("conversation_id") is None:
            continue
        row = buckets[(_day(c["created_at"]), c["account_id"], c["conversation_id"])]
        row["own_calls"] += 1
        row["own_cost"] += c.get("cost", 0)
    return buckets


def _day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _upsert(model: type[models.Model], key: tuple[str, ...], buckets: dict[tuple, Sums]) -> None:
    if not buckets:
        return
    scope = Q()
    for position, name in enumerate(key[:2]):  # hour/day and account: the indexed pair
        scope &= Q(**{f"{name}__in": {k[position] for k in buckets}})
    existing = {
        tuple(row[1:]): row[0]
        for row in model._default_manager.filter(scope).values_list("pk", *key)
    }
    sums = list(next(iter(buckets.values())))
    fields = [model._meta.get_field(name) for name in sums]
    changes = sorted(
        (existing[bucket], values) for bucket, values in buckets.items() if bucket in existing
    )
    if changes:
        _increment(model, fields, changes)
    bulk_insert(
        model,
        [
            {**dict(zip(key, bucket, strict=True)), **values}
            for bucket, values in buckets.items()
            if bucket not in existing
        ],
    )


def _increment(
    model: type[models.Model], fields: list[Any], changes: list[tuple[int, Sums]]
) -> None:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = {quote(f.column)} + %s" for f in fields)
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    sql = f"UPDATE {table} SET {assignments} WHERE {pk} = %s"
    params = [
        [f.get_db_prep_save(values[f.name], connection) for f in fields] + [pk]
        for pk, values in changes
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
