"""Price catalog, the append-only LLM-call ledger, the request log and the rollups
the report pages read (maintained by ``telemetry_app.rollups``)."""

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
    baseline_cost = models.DecimalField(
        max_digits=14,
        decimal_places=8,
        default=0,
        help_text="What the full history the client sent would have cost.",
    )
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


class Rollup(models.Model):
    """Totals of one hour × account × key × model × component.

    Proxied requests land under ``proxy_upstream`` with their key; vcloud's own
    LLM calls (tagger, compactor, …) under their component, without a key.
    Normally one row per bucket; two writers creating the same new bucket at
    the same instant may leave two rows, which every report sums anyway.
    """

    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="rollups")
    vckey = models.ForeignKey(
        VCKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="rollups"
    )
    model = models.CharField(max_length=200, blank=True)
    component = models.CharField(max_length=20, choices=Component.choices)
    requests = models.PositiveIntegerField(default=0, help_text="Proxied requests.")
    calls = models.PositiveIntegerField(default=0, help_text="LLM calls (ledger rows).")
    errors = models.PositiveIntegerField(default=0, help_text="Requests without a 2xx/3xx reply.")
    client_tokens = models.BigIntegerField(default=0)
    upstream_tokens = models.BigIntegerField(default=0, help_text="Input tokens sent to the LLM.")
    cached_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    baseline_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    duration_ms = models.FloatField(default=0, help_text="Sum: upstream or LLM call time.")
    overhead_ms = models.FloatField(default=0, help_text="Sum: time in the proxy before upstream.")

    class Meta:
        ordering = ["-hour"]
        indexes = [models.Index(fields=["account", "hour"])]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.component} {self.model}"


class SessionRollup(models.Model):
    """Totals of one day × conversation: the savings report's per-session rows."""

    day = models.DateField(help_text="UTC date.")
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="session_rollups")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="rollups")
    requests = models.PositiveIntegerField(default=0)
    client_tokens = models.BigIntegerField(default=0)
    upstream_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    baseline_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    own_calls = models.PositiveIntegerField(default=0, help_text="vcloud's own LLM calls.")
    own_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["-day"]
        indexes = [
            models.Index(fields=["account", "day"]),
            models.Index(fields=["day", "conversation"]),
        ]

    def __str__(self) -> str:
        return f"{self.day} conversation {self.conversation_id}"
