"""The memory settings page: edit, presets, tag rules, YAML export and import."""

from __future__ import annotations

import html

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from memory_app.config import (
    PRESETS,
    MemoryConfig,
    TagRule,
    config_for,
    config_to_dict,
    config_to_yaml,
    config_validate,
)
from vcloud.accounts.services import account_memory_settings_update

pytestmark = pytest.mark.django_db

URL = reverse("memory_settings")
LLM = {"format": "openai", "base_url": "https://llm.example.com", "model": "m", "api_key": "sk-top"}


def _form(config: MemoryConfig | None = None, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        k: v for k, v in config_to_dict(config or MemoryConfig()).items() if k != "tag_rules"
    }
    return {"action": "save", "preset": "custom", "tag_rules": "", **data, **changes}


def _body(response) -> str:  # type: ignore[no-untyped-def]
    return html.unescape(response.content.decode())


def _stored(account) -> dict:  # type: ignore[no-untyped-def]
    account.refresh_from_db()
    return account.memory_settings


def test_page_shows_the_effective_defaults_with_help(logged_in, account):
    response = logged_in.get(URL)
    assert response.status_code == 200
    form = response.context["form"]
    assert form["soft_threshold"].value() == 0.70
    assert form["protected_turns"].value() == 6
    assert form["preset"].value() == "custom"
    body = _body(response)
    assert 'name="protected_turns" value="6"' in body
    assert "never compacted" in body  # help text
    assert reverse("memory_settings_export") in body


def test_settings_page_links_to_the_memory_page(logged_in, account):
    assert f'href="{URL}"' in logged_in.get(reverse("settings")).content.decode()


def test_page_prefills_the_stored_settings(logged_in, account):
    account.memory_settings = {"protected_turns": 9, "tag_rules": [{"pattern": "a-*"}]}
    account.save()
    form = logged_in.get(URL).context["form"]
    assert form["protected_turns"].value() == 9
    assert form["tag_rules"].value() == "a-* 0 0\n"


def test_saving_valid_values_persists_them(logged_in, account):
    data = _form(protected_turns="9", soft_threshold="0.6", hard_threshold="0.8", gap_hours="2.5")
    response = logged_in.post(URL, data)
    assert response.status_code == 302
    assert response["Location"] == URL
    config = config_for(_stored(account))
    assert (config.protected_turns, config.soft_threshold, config.hard_threshold) == (9, 0.6, 0.8)
    assert config.gap_hours == 2.5
    page = logged_in.get(URL)
    assert "Memory settings saved." in page.content.decode()
    assert page.context["form"]["protected_turns"].value() == 9


def test_soft_at_or_above_hard_is_refused_and_nothing_is_saved(logged_in, account):
    account.memory_settings = {"protected_turns": 9}
    account.save()
    response = logged_in.post(URL, _form(soft_threshold="0.9", hard_threshold="0.8"))
    assert response.status_code == 200
    errors = response.context["form"].non_field_errors()
    assert errors == ["Need 0 < Compaction target < Soft threshold < Hard threshold ≤ 1"]
    body = _body(response)
    assert "Soft threshold < Hard threshold" in body
    assert 'name="soft_threshold" value="0.9" step="0.01" aria-invalid="true"' in body
    assert _stored(account) == {"protected_turns": 9}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"protected_turns": "six"}, "protected_turns", "whole number"),
        ({"soft_threshold": ""}, "soft_threshold", "required"),
        ({"gap_hours": "soon"}, "gap_hours", "Enter a number"),
        ({"tag_rules": "proj-* high"}, "tag_rules", "Line 1: priority must be a whole number"),
    ],
)
def test_bad_values_show_field_errors(logged_in, account, change, field, message):
    response = logged_in.post(URL, _form(**change))
    assert response.status_code == 200
    assert message in " ".join(response.context["form"].errors[field])
    assert _stored(account) == {}


def test_range_problems_name_the_settings_by_their_labels(logged_in, account):
    response = logged_in.post(URL, _form(protected_turns="-1", summary_ratio="1.5"))
    errors = response.context["form"].non_field_errors()
    assert "Protected turns ≥ 0, Segment max turns ≥ 1, Segment max tokens ≥ 50" in errors
    assert "0 < Summary ratio ≤ 1 and Summary max tokens ≥ 20" in errors
    assert _stored(account) == {}


def test_apply_preset_loads_its_values_and_saving_keeps_them(logged_in, account):
    data = _form(protected_turns="3", preset="coding", action="preset", tag_rules="x 1 2")
    response = logged_in.post(URL, data)
    assert response.status_code == 200
    assert _stored(account) == {}  # loading a preset saves nothing yet
    form = response.context["form"]
    assert not form.is_bound
    assert form["protected_turns"].value() == PRESETS["coding"]["protected_turns"]
    assert form["preset"].value() == "coding"
    assert form["tag_rules"].value() == "x 1 2"  # the rules being edited stay
    assert "Loaded the coding preset" in response.content.decode()

    saved = {name: form[name].value() for name in form.fields}
    assert logged_in.post(URL, {**saved, "action": "save"}).status_code == 302
    config = config_for(_stored(account))
    assert config.segment_max_turns == PRESETS["coding"]["segment_max_turns"]
    assert config.tag_rules == [TagRule("x", 1, 2)]
    assert logged_in.get(URL).context["form"]["preset"].value() == "coding"


def test_apply_preset_without_choosing_one_says_so(logged_in, account):
    response = logged_in.post(URL, _form(action="preset", preset="custom"))
    assert "Choose a preset" in " ".join(response.context["form"].errors["preset"])


def test_tag_rules_parse_from_lines(logged_in, account):
    rules = "# pattern priority ttl\nproj-* 5 40\n\nclient-?  -2   # lower\nmisc\n"
    assert logged_in.post(URL, _form(tag_rules=rules)).status_code == 302
    assert config_for(_stored(account)).tag_rules == [
        TagRule("proj-*", 5, 40),
        TagRule("client-?", -2, 0),
        TagRule("misc", 0, 0),
    ]
    assert logged_in.get(URL).context["form"]["tag_rules"].value() == (
        "proj-* 5 40\nclient-? -2 0\nmisc 0 0\n"
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("a 1 2 3", "Line 1: expected “pattern priority ttl_turns”"),
        ("a 1\nb 2 -1", "Line 2: ttl_turns must be 0"),
        ("a 1 x", "Line 1: ttl_turns must be a whole number, not 'x'"),
        ("a\n\na 3", "Line 3: the pattern 'a' is already on line 1"),
    ],
)
def test_bad_tag_rules_are_reported_by_line(logged_in, account, rules, message):
    response = logged_in.post(URL, _form(tag_rules=rules))
    assert message in " ".join(response.context["form"].errors["tag_rules"])
    assert _stored(account) == {}


def test_saving_keeps_the_llm_override_and_never_shows_its_key(logged_in, account):
    account.memory_settings = {"llm": LLM, "protected_turns": 9}
    account.save()
    assert "sk-top" not in logged_in.get(URL).content.decode()
    assert "sk-top" not in logged_in.get(reverse("memory_settings_export")).content.decode()
    logged_in.post(URL, _form(protected_turns="4"))
    stored = _stored(account)
    assert stored["llm"] == LLM
    assert config_for(stored).protected_turns == 4


def test_stored_invalid_settings_are_flagged_and_the_defaults_shown(logged_in, account):
    account.memory_settings = {"soft_threshold": 2}
    account.save()
    response = logged_in.get(URL)
    assert "saved memory settings are invalid" in response.content.decode()
    assert response.context["form"]["soft_threshold"].value() == 0.70


def test_export_downloads_yaml_that_round_trips_through_import(logged_in, account):
    mine = config_validate(
        {"protected_turns": 8, "tag_rules": [{"pattern": "p-*", "priority": 2, "ttl_turns": 9}]}
    )
    account_memory_settings_update(account=account, config=mine)
    response = logged_in.get(reverse("memory_settings_export"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == 'attachment; filename="vcloud-memory-alice.yaml"'
    exported = response.content
    assert exported.decode() == config_to_yaml(mine)

    account_memory_settings_update(account=account, config=MemoryConfig())
    upload = SimpleUploadedFile("memory.yaml", exported, content_type="application/yaml")
    response = logged_in.post(reverse("memory_settings_import"), {"yaml_file": upload})
    assert response.status_code == 302
    assert config_for(_stored(account)) == mine
    assert "Memory settings imported." in logged_in.get(URL).content.decode()


def test_pasted_yaml_replaces_the_settings_but_not_the_llm_override(logged_in, account):
    account.memory_settings = {"llm": LLM, "protected_turns": 9, "gap_hours": 1.0}
    account.save()
    text = "preset: long-research\nprotected_turns: 3\nllm: {api_key: other}\n"
    response = logged_in.post(reverse("memory_settings_import"), {"yaml_text": text})
    assert response.status_code == 302
    stored = _stored(account)
    assert stored["llm"] == LLM
    config = config_for(stored)
    assert config.protected_turns == 3
    assert config.soft_threshold == PRESETS["long-research"]["soft_threshold"]
    assert config.gap_hours == MemoryConfig().gap_hours  # replaced, not merged


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("soft_threshold: [", "Not valid YAML"),
        ("soft_threshold: 0.9\nhard_threshold: 0.8\n", "soft_threshold < hard_threshold"),
        ("colour: blue\n", "Unknown setting 'colour'"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("", "Choose a YAML file or paste YAML"),
        ("a: &x [1]\nb: *x\n", "anchors and aliases"),
    ],
)
def test_bad_yaml_is_refused_with_a_form_error(logged_in, account, text, message):
    account.memory_settings = {"protected_turns": 9}
    account.save()
    response = logged_in.post(reverse("memory_settings_import"), {"yaml_text": text})
    assert response.status_code == 200
    errors = " ".join(response.context["import_form"].non_field_errors())
    assert message in errors
    assert message in _body(response)
    assert _stored(account) == {"protected_turns": 9}


def test_import_refuses_a_file_that_is_not_utf8(logged_in, account):
    upload = SimpleUploadedFile("memory.yaml", b"\xff\xfe\x00bad")
    response = logged_in.post(reverse("memory_settings_import"), {"yaml_file": upload})
    assert "not UTF-8" in " ".join(response.context["import_form"].non_field_errors())


def test_another_users_settings_are_never_shown_or_changed(logged_in, account, other_account):
    other_account.memory_settings = {"protected_turns": 17, "tag_rules": [{"pattern": "secret-*"}]}
    other_account.save()
    page = logged_in.get(URL).content.decode()
    assert "secret-*" not in page
    assert 'value="17"' not in page
    assert "secret-*" not in logged_in.get(reverse("memory_settings_export")).content.decode()
    logged_in.post(URL, _form(protected_turns="2"))
    logged_in.post(reverse("memory_settings_import"), {"yaml_text": "protected_turns: 1\n"})
    assert _stored(other_account) == {
        "protected_turns": 17,
        "tag_rules": [{"pattern": "secret-*"}],
    }
    assert config_for(_stored(account)).protected_turns == 1


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("get", "memory_settings"),
        ("post", "memory_settings"),
        ("get", "memory_settings_export"),
        ("post", "memory_settings_import"),
    ],
)
def test_anonymous_users_are_sent_to_login(client, account, method, name):
    response = getattr(client, method)(reverse(name), {"protected_turns": "1"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert _stored(account) == {}


def test_import_and_export_take_only_their_method(logged_in, account):
    assert logged_in.get(reverse("memory_settings_import")).status_code == 405
    assert logged_in.post(reverse("memory_settings_export")).status_code == 405
