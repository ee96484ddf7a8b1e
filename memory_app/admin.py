from __future__ import annotations

from django.contrib import admin

from memory_app import models


class TurnInline(admin.TabularInline):
    model = models.Turn
    fields = ("position", "role", "text", "token_count", "session_date", "replaced")
    readonly_fields = fields
    extra = 0
    show_change_link = True
    max_num = 0


@admin.register(models.Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "account",
        "format",
        "model",
        "turn_count",
        "request_count",
        "client_tokens",
        "upstream_tokens",
        "updated_at",
    )
    list_filter = ("format", "updated_at")
    search_fields = ("title", "session_id", "model", "account__name")
    raw_id_fields = ("account", "vckey")
    date_hierarchy = "updated_at"
    inlines = [TurnInline]


@admin.register(models.Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = (
        "conversation",
        "position",
        "role",
        "token_count",
        "session_date",
        "replaced",
        "created_at",
    )
    list_filter = ("role", "replaced")
    search_fields = ("text", "conversation__title", "conversation__session_id")
    raw_id_fields = ("conversation",)
    list_select_related = ("conversation",)


class TagAliasInline(admin.TabularInline):
    model = models.TagAlias
    extra = 0


@admin.register(models.Tag)
class TagAdmin(admin.ModelAdmin):
    list_display = ("name", "conversation", "turn_count", "created_at")
    search_fields = ("name", "description")
    raw_id_fields = ("conversation",)
    inlines = [TagAliasInline]


@admin.register(models.TagAlias)
class TagAliasAdmin(admin.ModelAdmin):
    list_display = ("alias", "tag")
    search_fields = ("alias", "tag__name")
    raw_id_fields = ("tag",)


@admin.register(models.TurnTag)
class TurnTagAdmin(admin.ModelAdmin):
    list_display = ("turn", "tag", "weight", "related")
    list_filter = ("related",)
    search_fields = ("tag__name",)
    raw_id_fields = ("turn", "tag")


@admin.register(models.Segment)
class SegmentAdmin(admin.ModelAdmin):
    list_display = (
        "conversation",
        "start_position",
        "end_position",
        "level",
        "tokens",
        "summary_tokens",
        "session_date",
    )
    list_filter = ("level",)
    search_fields = ("summary", "full_text")
    raw_id_fields = ("conversation",)
    exclude = ("embedding",)


@admin.register(models.SegmentTag)
class SegmentTagAdmin(admin.ModelAdmin):
    list_display = ("segment", "tag")
    search_fields = ("tag__name",)
    raw_id_fields = ("segment", "tag")


@admin.register(models.TagSummary)
class TagSummaryAdmin(admin.ModelAdmin):
    list_display = ("tag", "conversation", "tokens", "covers_until", "updated_at")
    search_fields = ("summary", "tag__name")
    raw_id_fields = ("conversation", "tag")
    exclude = ("embedding",)


@admin.register(models.Fact)
class FactAdmin(admin.ModelAdmin):
    list_display = (
        "what",
        "subject",
        "verb",
        "fact_type",
        "status",
        "mentioned_at",
        "conversation",
    )
    list_filter = ("fact_type", "status")
    search_fields = ("what", "subject", "object")
    raw_id_fields = ("conversation", "superseded_by", "turns", "tags")


@admin.register(models.FactLink)
class FactLinkAdmin(admin.ModelAdmin):
    list_display = ("source", "link_type", "target", "conversation", "created_at")
    list_filter = ("link_type",)
    raw_id_fields = ("conversation", "source", "target")


@admin.register(models.StoredToolChain)
class StoredToolChainAdmin(admin.ModelAdmin):
    list_display = ("conversation", "start_position", "end_position", "tokens", "created_at")
    raw_id_fields = ("conversation",)


@admin.register(models.MediaObject)
class MediaObjectAdmin(admin.ModelAdmin):
    list_display = (
        "sha256",
        "media_type",
        "byte_size",
        "width",
        "height",
        "conversation",
        "created_at",
    )
    list_filter = ("media_type",)
    search_fields = ("sha256",)
    raw_id_fields = ("conversation", "turn")


@admin.register(models.MemoryJob)
class MemoryJobAdmin(admin.ModelAdmin):
    list_display = (
        "conversation",
        "kind",
        "state",
        "progress",
        "total",
        "attempts",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "kind", "created_at")
    search_fields = ("conversation__title", "conversation__session_id", "error")
    raw_id_fields = ("conversation",)
    readonly_fields = ("created_at", "started_at", "finished_at")
    date_hierarchy = "created_at"


@admin.register(models.RequestContext)
class RequestContextAdmin(admin.ModelAdmin):
    list_display = (
        "request_id",
        "conversation",
        "planned",
        "ceiling",
        "client_tokens",
        "upstream_tokens",
        "created_at",
    )
    list_filter = ("planned", "created_at")
    search_fields = ("request_id", "conversation__title", "conversation__session_id")
    raw_id_fields = ("conversation",)
    date_hierarchy = "created_at"
