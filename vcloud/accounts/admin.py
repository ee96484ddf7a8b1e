from __future__ import annotations

from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from vcloud.accounts.models import Account, VCKey
from vcloud.accounts.services import vckey_revoke


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "context_ceiling", "cache_aware_layout", "created_at")
    search_fields = ("name", "owner__username", "owner__email")
    list_filter = ("cache_aware_layout", "capture_payloads")
    raw_id_fields = ("owner",)
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(VCKey)
class VCKeyAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "prefix",
        "account",
        "created_at",
        "last_used_at",
        "request_count",
        "active",
    )
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "created_at")
    search_fields = ("name", "prefix", "account__name", "account__owner__username")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at", "request_count")
    raw_id_fields = ("account",)
    actions = ("revoke",)

    @admin.display(boolean=True)
    def active(self, obj: VCKey) -> bool:
        return obj.is_active

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Raw keys are shown once at creation: create them on the keys page or with `vc_key create`.
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[VCKey]) -> None:
        keys = list(queryset.filter(revoked_at__isnull=True))
        for key in keys:
            vckey_revoke(key=key)
        self.message_user(request, f"Revoked {len(keys)} key(s).", messages.SUCCESS)
