"""The vc management command against a processed conversation."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory_app.models import Segment, Tag, TagAlias
from tests.memory_app.corpus import conversation_texts
from tests.memory_app.test_pipeline import _conversation, _run

pytestmark = pytest.mark.django_db


def _vc(*args: str) -> str:
    out = StringIO()
    call_command("vc", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def processed(account):
    account.context_ceiling = 2_000
    account.save()
    conversation = _conversation(account, conversation_texts(rounds=3))
    _run(conversation)
    conversation.refresh_from_db()
    return conversation


def test_status_lists_conversations_with_their_memory(processed):
    out = _vc("status")
    assert str(processed.pk) in out
    assert str(processed.watermark) in out


def test_tags_lists_the_vocabulary_by_use(processed):
    out = _vc("tags", "--conversation", str(processed.pk))
    top = Tag.objects.filter(conversation=processed).order_by("-turn_count", "name").first()
    assert top.name in out


def test_recall_prints_the_tag_summary_and_segments(processed):
    segment = Segment.objects.filter(conversation=processed).first()
    tag = segment.tags.first()
    out = _vc("recall", tag.name, "--conversation", str(processed.pk))
    assert tag.name in out
    assert f"turns {segment.start_position}–{segment.end_position}" in out


@pytest.mark.django_db(transaction=True)  # the job runs on a thread of its own
def test_compact_runs_the_job_and_reports_the_result(account):
    account.context_ceiling = 2_000
    account.save()
    conversation = _conversation(account, conversation_texts(rounds=3))
    out = _vc("compact", "--conversation", str(conversation.pk))
    conversation.refresh_from_db()
    assert conversation.watermark > 0
    assert f"watermark {conversation.watermark}" in out
    assert Segment.objects.filter(conversation=conversation).exists()


def test_aliases_add_then_list(processed):
    tag = Tag.objects.filter(conversation=processed).first()
    _vc("aliases", "add", "my-alias", tag.name, "--conversation", str(processed.pk))
    assert TagAlias.objects.filter(tag=tag, alias="my-alias").exists()
    assert f"my-alias → {tag.name}" in _vc("aliases", "list", "--conversation", str(processed.pk))
    with pytest.raises(CommandError, match="no tag"):
        _vc("aliases", "add", "x", "no-such-tag", "--conversation", str(processed.pk))


def test_an_unknown_conversation_is_a_clear_error(db):
    with pytest.raises(CommandError, match="no conversation 999999"):
        _vc("tags", "--conversation", "999999")


def test_config_validate_export_import(account, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("preset: coding\nsoft_threshold: 0.6\n")
    assert _vc("config", "validate", str(good)).strip() == "valid"
    bad = tmp_path / "bad.yaml"
    bad.write_text("soft_threshold: 0.9\nhard_threshold: 0.8\nwhatever: 1\n")
    with pytest.raises(CommandError, match="unknown setting 'whatever'"):
        _vc("config", "validate", str(bad))
    _vc("config", "import", str(good), "--user", account.owner.username)
    account.refresh_from_db()
    assert account.memory_settings["protected_turns"] == 10  # from the coding preset
    assert account.memory_settings["soft_threshold"] == 0.6
    exported = _vc("config", "export", "--user", account.owner.username)
    assert "protected_turns: 10" in exported


def test_retrieve_prints_the_plan_a_new_message_would_get(processed):
    out = _vc(
        "retrieve", "--conversation", str(processed.pk), "-m", "What about the sink plumbing?"
    )
    assert out.startswith("ceiling 2,000: ")
    assert "planned" in out
    assert "sink" in out.lower()  # a recalled turn about the sink, in the preview column
    assert "- recall" in out or "- stable block" in out  # the planner's reasons


def test_transform_prints_the_upstream_body_as_json(processed):
    out = _vc("transform", "--conversation", str(processed.pk), "-m", "And the cabinets?")
    body = json.loads(out)
    assert body["messages"][-1]["role"] == "user"
    question, recalled = body["messages"][-1]["content"]
    assert question["text"] == "And the cabinets?"
    assert recalled["text"].startswith("<recalled-context>")
    assert "<virtual-context>" in json.dumps(body["system"])
    assert len(body["messages"]) < processed.turns.count() + 1  # older turns left out
    out = _vc("transform", "--conversation", str(processed.pk), "-m", "hi", "--ceiling", "900000")
    assert len(json.loads(out)["messages"]) < processed.turns.count() + 1  # still compacted
