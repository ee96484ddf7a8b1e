"""Accounts own everything: keys, conversations, ledger rows. One account per
user for now; the account is the unit of isolation."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Account(models.Model):
    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account"
    )
    name = models.CharField(max_length=150)
    context_ceiling = models.PositiveIntegerField(
        default=16000, help_text="Token ceiling of the payload sent upstream."
    )
    capture_payloads = models.BooleanField(
        default=False, help_text="Keep the exact upstream payload of each request (keys redacted)."
    )
    cache_aware_layout = models.BooleanField(
        default=True, help_text="Plan payloads as a stable prefix plus a volatile tail."
    )
    upstream_anthropic = models.URLField(blank=True, help_text="Overrides VC_UPSTREAM_ANTHROPIC.")
    upstream_openai = models.URLField(blank=True, help_text="Overrides VC_UPSTREAM_OPENAI.")
    upstream_gemini = models.URLField(blank=True, help_text="Overrides VC_UPSTREAM_GEMINI.")
    memory_settings = models.JSONField(
        default=dict,
        blank=True,
        help_text="Memory engine settings (thresholds, protected turns, summary sizes, "
        "tag rules); missing keys take the defaults.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    def upstream_for(self, provider: str) -> str:
        return str(getattr(self, f"upstream_{provider}", "") or "")


class VCKey(models.Model):
    """A vckey. Only its SHA-256 is stored; the raw key is shown once."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="vckeys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    context_ceiling = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the account's ceiling for this key."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    request_count = models.BigIntegerField(default=0)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "vckey"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["account", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
