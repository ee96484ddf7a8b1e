"""Memory settings: defaults, presets, validation, YAML."""

from __future__ import annotations

import pytest

from memory_app.config import (
    PRESETS,
    MemoryConfig,
    TagRule,
    config_for,
    config_from_yaml,
    config_to_yaml,
    config_validate,
)
from memory_app.errors import ConfigError


def test_missing_keys_take_the_defaults():
    assert config_for({}) == MemoryConfig()
    assert config_for({"protected_turns": 9}).protected_turns == 9


def test_a_preset_applies_and_explicit_keys_win():
    config = config_validate({"preset": "long-research", "summary_max_tokens": 100})
    assert config.soft_threshold == PRESETS["long-research"]["soft_threshold"]
    assert config.summary_max_tokens == 100


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"soft_threshold": 0.9, "hard_threshold": 0.8}, "soft_threshold < hard_threshold"),
        ({"protected_turns": "six"}, "protected_turns: a number"),
        ({"nope": 1}, "unknown setting 'nope'"),
        ({"preset": "gaming"}, "unknown preset 'gaming'"),
        ({"tag_rules": [{"pattern": "x", "colour": 1}]}, "tag_rules"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_invalid_settings_say_what_is_wrong(data, message):
    with pytest.raises(ConfigError, match=message):
        config_validate(data)


def test_stored_invalid_settings_fall_back_to_defaults():
    assert config_for({"soft_threshold": 2}) == MemoryConfig()


def test_the_llm_override_does_not_disturb_the_other_settings():
    config = config_for({"protected_turns": 8, "llm": {"format": "openai", "model": "m"}})
    assert config.protected_turns == 8


def test_yaml_round_trip_keeps_tag_rules():
    config = config_validate(
        {"protected_turns": 7, "tag_rules": [{"pattern": "proj-*", "priority": 5, "ttl_turns": 40}]}
    )
    again = config_from_yaml(config_to_yaml(config))
    assert again == config
    assert again.tag_rules == [TagRule("proj-*", 5, 40)]
    with pytest.raises(ConfigError, match="not valid YAML"):
        config_from_yaml("a: [unclosed")


def test_compaction_settings_carry_the_ceiling():
    settings = config_validate({"soft_threshold": 0.6}).compaction(8_000)
    assert (settings.ceiling, settings.soft, settings.hard) == (8_000, 0.6, 0.85)
