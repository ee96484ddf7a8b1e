from __future__ import annotations

from django.contrib import admin

from telemetry_app.models import LLMCall, ModelPrice, RequestLog, Rollup, SessionRollup


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = (
        "model",
        "provider",
        "input_price",
        "output_price",
        "cache_read_price",
        "cache_write_price",
        "context_window",
        "effective_date",
    )
    list_filter = ("provider", "effective_date")
    search_fields = ("model",)


@admin.register(LLMCall)
class LLMCallAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "component",
        "model",
        "account",
        "input_tokens",
        "cached_tokens",
        "output_tokens",
        "cost",
        "duration_ms",
    )
    list_filter = ("component", "provider", "priced", "created_at")
    search_fields = ("model", "request_id", "account__name")
    raw_id_fields = ("account", "conversation")
    date_hierarchy = "created_at"

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False  # the ledger is append-only


@admin.register(RequestLog)
class RequestLogAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "format",
        "model",
        "stream",
        "status",
        "client_tokens",
        "upstream_tokens",
        "cached_tokens",
        "cost",
        "baseline_cost",
        "overhead_ms",
        "upstream_ms",
        "account",
    )
    list_filter = ("format", "stream", "status", "passthrough", "created_at")
    search_fields = ("model", "request_id", "path", "account__name", "error")
    raw_id_fields = ("account", "vckey", "conversation")
    date_hierarchy = "created_at"


class _ReadOnly(admin.ModelAdmin):
    """Rollups are kept by telemetry_app.rollups as rows land; edits would make
    them disagree with the ledger."""

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Rollup)
class RollupAdmin(_ReadOnly):
    list_display = (
        "hour",
        "account",
        "vckey",
        "model",
        "component",
        "requests",
        "calls",
        "errors",
        "client_tokens",
        "upstream_tokens",
        "cost",
        "baseline_cost",
    )
    list_filter = ("component", "hour")
    list_select_related = ("account", "vckey")
    search_fields = ("model", "account__name")
    raw_id_fields = ("account", "vckey")
    date_hierarchy = "hour"


@admin.register(SessionRollup)
class SessionRollupAdmin(_ReadOnly):
    list_display = (
        "day",
        "account",
        "conversation",
        "requests",
        "client_tokens",
        "upstream_tokens",
        "cost",
        "baseline_cost",
        "own_cost",
    )
    list_filter = ("day",)
    list_select_related = ("account", "conversation")
    search_fields = ("account__name", "conversation__title", "conversation__session_id")
    raw_id_fields = ("account", "conversation")
    date_hierarchy = "day"
