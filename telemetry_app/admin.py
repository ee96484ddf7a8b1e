from __future__ import annotations

from django.contrib import admin

from telemetry_app.models import LLMCall, ModelPrice, RequestLog


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
        "overhead_ms",
        "upstream_ms",
        "account",
    )
    list_filter = ("format", "stream", "status", "passthrough", "created_at")
    search_fields = ("model", "request_id", "path", "account__name", "error")
    raw_id_fields = ("account", "vckey", "conversation")
    date_hierarchy = "created_at"
