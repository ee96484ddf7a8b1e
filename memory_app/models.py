"""The memory of a conversation, from verbatim turns up to facts.

Conversation (one account) → Turn (verbatim, never deleted) → Segment (level-1
summary over a turn range) → TagSummary (level 2) → Fact and FactLink. Every
row hangs off a conversation, and a conversation off an account: selectors
always filter by both, so no row is reachable across accounts.
"""

from __future__ import annotations

from django.db import models

from vcloud.accounts.models import Account, VCKey


class Conversation(models.Model):
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="conversations")
    vckey = models.ForeignKey(
        VCKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="conversations"
    )
    session_id = models.CharField(max_length=200, blank=True, help_text="X-VC-Session, if sent.")
    fingerprint = models.CharField(max_length=64, blank=True, db_index=True)
    format = models.CharField(max_length=20, blank=True)
    model = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    turn_count = models.PositiveIntegerField(default=0)
    request_count = models.PositiveIntegerField(default=0)
    client_tokens = models.BigIntegerField(default=0, help_text="Tokens the client sent, summed.")
    upstream_tokens = models.BigIntegerField(default=0, help_text="Tokens sent upstream, summed.")
    watermark = models.IntegerField(
        default=0, help_text="Turns before this position are compacted."
    )

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["account", "-updated_at"]),
            models.Index(fields=["account", "session_id"]),
            models.Index(fields=["account", "fingerprint"]),
        ]

    def __str__(self) -> str:
        return self.title or self.session_id or f"conversation {self.pk}"


class Role(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class Turn(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=12, choices=Role.choices)
    content = models.JSONField(help_text="The verbatim provider item, structured blocks included.")
    text = models.TextField(blank=True, help_text="Plain text for search and display.")
    content_hash = models.CharField(max_length=64)
    token_count = models.PositiveIntegerField(default=0)
    session_date = models.DateField(null=True, blank=True)
    replaced = models.BooleanField(
        default=False, help_text="The client later sent different history at this position."
    )
    tagged = models.BooleanField(default=False, help_text="Background tagging has seen it.")
    embedding = models.BinaryField(null=True, blank=True, help_text="float32 vector")
    embedding_model = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "position", "id"]
        indexes = [
            models.Index(fields=["conversation", "position"]),
            models.Index(fields=["conversation", "tagged"]),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.role}"


class Tag(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True)
    turn_count = models.PositiveIntegerField(default=0)
    embedding = models.BinaryField(null=True, blank=True, help_text="float32 vector of the name")
    embedding_model = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "name"], name="tag_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class TagAlias(models.Model):
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="aliases")
    alias = models.CharField(max_length=100)

    class Meta:
        verbose_name_plural = "tag aliases"
        constraints = [models.UniqueConstraint(fields=["tag", "alias"], name="tagalias_unique")]

    def __str__(self) -> str:
        return f"{self.alias} → {self.tag.name}"


class TurnTag(models.Model):
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="turn_tags")
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="turn_tags")
    weight = models.FloatField(default=1.0)
    related = models.BooleanField(default=False, help_text="A related tag, not a primary one.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["turn", "tag"], name="turntag_unique")]

    def __str__(self) -> str:
        return f"turn {self.turn_id} · tag {self.tag_id}"


class Segment(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="segments"
    )
    start_position = models.PositiveIntegerField()
    end_position = models.PositiveIntegerField()
    level = models.PositiveSmallIntegerField(default=1)
    summary = models.TextField()
    full_text = models.TextField(blank=True)
    tokens = models.PositiveIntegerField(default=0, help_text="Tokens of the turns it covers.")
    summary_tokens = models.PositiveIntegerField(default=0)
    session_date = models.DateField(null=True, blank=True)
    embedding = models.BinaryField(null=True, blank=True, help_text="float32 vector")
    embedding_model = models.CharField(max_length=100, blank=True)
    tags = models.ManyToManyField(Tag, through="SegmentTag", related_name="segments")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "start_position"]
        indexes = [models.Index(fields=["conversation", "start_position"])]

    def __str__(self) -> str:
        return f"turns {self.start_position}–{self.end_position}"


class SegmentTag(models.Model):
    segment = models.ForeignKey(Segment, on_delete=models.CASCADE, related_name="segment_tags")
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="segment_tags")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["segment", "tag"], name="segmenttag_unique")]

    def __str__(self) -> str:
        return f"segment {self.segment_id} · tag {self.tag_id}"


class TagSummary(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tag_summaries"
    )
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="summaries")
    summary = models.TextField()
    tokens = models.PositiveIntegerField(default=0)
    covers_until = models.PositiveIntegerField(default=0, help_text="Last turn position covered.")
    embedding = models.BinaryField(null=True, blank=True)
    embedding_model = models.CharField(max_length=100, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "tag summaries"
        constraints = [
            models.UniqueConstraint(fields=["conversation", "tag"], name="tagsummary_unique")
        ]

    def __str__(self) -> str:
        return f"summary of {self.tag.name}"


class FactType(models.TextChoices):
    PERSONAL = "personal"
    PREFERENCE = "preference"
    EVENT = "event"
    PLAN = "plan"
    STATE = "state"
    KNOWLEDGE = "knowledge"
    OTHER = "other"


class FactStatus(models.TextChoices):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    RETRACTED = "retracted"


class Fact(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="facts")
    subject = models.CharField(max_length=200)
    verb = models.CharField(max_length=100)
    object = models.CharField(max_length=500, blank=True)
    what = models.TextField(help_text="The fact as one sentence.")
    fact_type = models.CharField(max_length=20, choices=FactType.choices, default=FactType.OTHER)
    status = models.CharField(max_length=20, choices=FactStatus.choices, default=FactStatus.ACTIVE)
    mentioned_at = models.DateField(null=True, blank=True, help_text="Session date it was said.")
    valid_from = models.DateField(null=True, blank=True)
    valid_until = models.DateField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    turns = models.ManyToManyField(Turn, blank=True, related_name="facts")
    tags = models.ManyToManyField(Tag, blank=True, related_name="facts")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "-created_at"]
        indexes = [models.Index(fields=["conversation", "status"])]

    def __str__(self) -> str:
        return self.what[:80]


class LinkType(models.TextChoices):
    SUPERSEDES = "supersedes"
    CAUSED_BY = "caused_by"
    PART_OF = "part_of"
    CONTRADICTS = "contradicts"
    SAME_AS = "same_as"
    RELATED_TO = "related_to"


class FactLink(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="fact_links"
    )
    source = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="links_out")
    target = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="links_in")
    link_type = models.CharField(max_length=20, choices=LinkType.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "target", "link_type"], name="factlink_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source_id} {self.link_type} {self.target_id}"


class StoredToolChain(models.Model):
    """A tool call/result chain kept whole for exact restore after collapse."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="tool_chains"
    )
    start_position = models.PositiveIntegerField()
    end_position = models.PositiveIntegerField()
    tool_names = models.JSONField(default=list)
    items = models.JSONField(help_text="The verbatim provider items of the chain.")
    tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["conversation", "start_position"])]

    def __str__(self) -> str:
        return f"tools {', '.join(self.tool_names)} @ {self.start_position}"


class MediaObject(models.Model):
    """An image or document original, stored on disk under VC_DATA_DIR by hash."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="media")
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="media"
    )
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=100)
    byte_size = models.PositiveBigIntegerField(default=0)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    path = models.CharField(max_length=500, help_text="Relative to VC_DATA_DIR.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "sha256"], name="media_unique")
        ]

    def __str__(self) -> str:
        return f"{self.media_type} {self.sha256[:12]}"


class JobState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class MemoryJob(models.Model):
    """One unit of background work on a conversation (tagging, compaction, …).

    ``pending_jobs`` of a conversation counts its pending and running jobs."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=40)
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.PENDING)
    progress = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["conversation", "state"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.state}"


class RequestContext(models.Model):
    """What one planned request's context window held, and why.

    Written with the request's log row when the planner ran (a request whose
    body is clearly under its ceiling is forwarded as sent without one).
    ``report`` is the planner's account: token parts of the ceiling, the kept
    and dropped history ranges, every recalled item with its per-signal scores,
    candidates left out, and the planner's reasons. ``payload`` is the exact
    upstream body, kept only when the account captures payloads (provider keys
    travel in headers and the query string, never in it)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="request_contexts"
    )
    request_id = models.CharField(max_length=40, unique=True)
    ceiling = models.PositiveIntegerField(default=0)
    planned = models.BooleanField(default=False, help_text="False: forwarded as sent.")
    client_tokens = models.PositiveIntegerField(default=0, help_text="Counted by our tokenizer.")
    upstream_tokens = models.PositiveIntegerField(default=0, help_text="Counted by our tokenizer.")
    report = models.JSONField(default=dict)
    payload = models.TextField(blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["conversation", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.request_id} {'planned' if self.planned else 'as sent'}"
