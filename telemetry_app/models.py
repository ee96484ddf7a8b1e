"""Price catalog, the append-only LLM-call ledger and the request log."""

from __future__ import annotations

from django.db import models

from memory_app.models import Conversation
from vcloud.accounts.models import Account, VCKey


class Provider(models.TextChoices):
    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    GEMINI = "gemini"
    LOCAL = "local"


class ModelPrice(models.Model):
    """USD per million tokens. The newest effective row of a model wins."""

    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=20, choices=Provider.choices)
    aliases = models.JSONField(default=list, blank=True)
    context_window = models.PositiveIntegerField(default=0)
    input_price = models.DecimalField(max_digits=12, decimal_places=6)
    output_price = models.DecimalField(max_digits=12, decimal_places=6)
    cache_read_price = models.DecimalField(max_digits=12, decimal_places=6)
    cache_write_price = models.DecimalField(max_digits=12, decimal_places=6)
    effective_date = models.DateField()

    class Meta:
        ordering = ["provider", "model", "-effective_date"]
        constraints = [
            models.UniqueConstraint(fields=["model", "effective_date"], name="price_unique_date")
        ]

    def __str__(self) -> str:
        return f"{self.model} ({self.effective_date})"


class Component(models.TextChoices):
    PROXY_UPSTREAM = "proxy_upstream"
    TAGGER = "tagger"
    COMPACTOR = "compactor"
    FACT_EXTRACTOR = "fact_extractor"
    SUPERSESSION = "supersession"
    TOOL_LOOP = "tool_loop"
    EMBEDDER = "embedder"


class LLMCall(models.Model):
    """One LLM call, ours or the client's. Rows are never updated."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="llm_calls")
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="llm_calls"
    )
    request_id = models.CharField(max_length=40, blank=True, db_index=True)
    component = models.CharField(max_length=20, choices=Component.choices)
    provider = models.CharField(max_length=20, choices=Provider.choices)
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveIntegerField(default=0, help_text="Whole prompt, cache included.")
    cached_tokens = models.PositiveIntegerField(default=0, help_text="Read from the prompt cache.")
    cache_write_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    priced = models.BooleanField(default=True, help_text="False when the model has no price.")
    duration_ms = models.FloatField(default=0)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "LLM call"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["account", "-created_at"]),
            models.Index(fields=["account", "component", "-created_at"]),
            models.Index(fields=["conversation", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.component} {self.model}"


class RequestLog(models.Model):
    """One row per proxied request."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="requests")
    vckey = models.ForeignKey(
        VCKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="requests"
    )
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="requests"
    )
    request_id = models.CharField(max_length=40, unique=True)
    format = models.CharField(max_length=20)
    path = models.CharField(max_length=300)
    model = models.CharField(max_length=200, blank=True)
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField(default=0)
    client_tokens = models.PositiveIntegerField(default=0, help_text="Tokens the client sent.")
    upstream_tokens = models.PositiveIntegerField(default=0, help_text="Tokens sent upstream.")
    cached_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    overhead_ms = models.FloatField(default=0)
    upstream_ms = models.FloatField(default=0)
    passthrough = models.BooleanField(default=False)
    error = models.TextField(blank=True, help_text="Why the request failed or fell back.")
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["account", "-created_at"]),
            models.Index(fields=["conversation", "-created_at"]),
            models.Index(fields=["vckey", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.format} {self.model} {self.status}"
