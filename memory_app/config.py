"""An account's memory settings: defaults, presets, validation, YAML.

Stored as ``Account.memory_settings`` (JSON); keys that are missing take the
defaults below, so a new setting never needs a data migration. ``config_for``
gives the effective settings; ``config_validate`` checks a user's dict (from
the settings page, the admin or a YAML file) and says what is wrong.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import yaml

from memory_app.engine.types import CompactionSettings
from memory_app.errors import ConfigError


@dataclass(slots=True)
class TagRule:
    """Tags matching ``pattern`` (fnmatch) get ``priority`` (higher first) in
    assembly; ``ttl_turns`` > 0 ages them out that many turns after last use."""

    pattern: str
    priority: int = 0
    ttl_turns: int = 0


@dataclass(slots=True)
class MemoryConfig:
    soft_threshold: float = 0.70
    hard_threshold: float = 0.85
    protected_turns: int = 6
    window_share: float = 1.0
    stable_share: float = 0.10
    recall_share: float = 0.08
    recall_confidence: float = 0.95
    recall_reach: float = 0.6
    compaction_target: float = 0.25
    segment_max_tokens: int = 2_000
    segment_max_turns: int = 12
    summary_ratio: float = 0.25
    summary_max_tokens: int = 300
    tag_summary_max_tokens: int = 400
    gap_hours: float = 6.0
    tag_split_share: float = 0.35
    tag_split_min_turns: int = 20
    tagger_lookback: int = 3
    tag_rules: list[TagRule] = field(default_factory=list)

    def compaction(self, ceiling: int) -> CompactionSettings:
        return CompactionSettings(
            ceiling=ceiling,
            soft=self.soft_threshold,
            hard=self.hard_threshold,
            protected_turns=self.protected_turns,
            target=self.compaction_target,
            segment_max_tokens=self.segment_max_tokens,
            segment_max_turns=self.segment_max_turns,
            summary_ratio=self.summary_ratio,
            summary_max_tokens=self.summary_max_tokens,
            gap_hours=self.gap_hours,
        )


PRESETS: dict[str, dict[str, Any]] = {
    # Coding agents: long tool chains, keep more recent turns verbatim.
    "coding": {"protected_turns": 10, "segment_max_turns": 20, "summary_max_tokens": 400},
    # Chat assistants: many short turns about a person's life; small summaries.
    "chat": {"protected_turns": 6, "segment_max_turns": 12, "summary_max_tokens": 250},
    # Long research: big segments, generous summaries, compact earlier.
    "long-research": {
        "soft_threshold": 0.60,
        "segment_max_tokens": 4_000,
        "summary_max_tokens": 600,
        "tag_summary_max_tokens": 800,
    },
}

_FIELDS = {f.name: f for f in dataclasses.fields(MemoryConfig)}


def config_validate(data: Any) -> MemoryConfig:
    """The config a user dict describes; ``ConfigError`` listing every problem."""
    if not isinstance(data, dict):
        raise ConfigError("memory settings must be a mapping")
    data = dict(data)
    data.pop("llm", None)  # the account's LLM override: memory_app.llm reads it
    preset = data.pop("preset", None)
    merged: dict[str, Any] = dict(PRESETS.get(preset, {})) if preset else {}
    problems = [f"unknown preset {preset!r}"] if preset and preset not in PRESETS else []
    merged.update(data)
    values: dict[str, Any] = {}
    for name, value in merged.items():
        if name not in _FIELDS:
            problems.append(f"unknown setting {name!r}")
            continue
        try:
            values[name] = _coerce(name, value)
        except (TypeError, ValueError) as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        raise ConfigError("; ".join(problems))
    config = MemoryConfig(**values)
    _check_ranges(config)
    return config


def _coerce(name: str, value: Any) -> Any:
    if name == "tag_rules":
        if not isinstance(value, list):
            raise TypeError("a list of {pattern, priority, ttl_turns}")
        return [_rule(rule) if isinstance(rule, dict) else _bad_rule(rule) for rule in value]
    default = getattr(MemoryConfig(), name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a number, not {value!r}")
    return type(default)(value)


def _bad_rule(rule: Any) -> TagRule:
    raise TypeError(f"a tag rule must be a mapping, not {rule!r}")


def _rule(data: dict[str, Any]) -> TagRule:
    rule = TagRule(**data)
    if not isinstance(rule.pattern, str) or not rule.pattern.strip():
        raise TypeError("a tag rule needs a pattern (text)")
    for value in (rule.priority, rule.ttl_turns):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"tag rule numbers are whole numbers, not {value!r}")
    if rule.ttl_turns < 0:
        raise ValueError("ttl_turns ≥ 0")
    return rule


def _check_ranges(c: MemoryConfig) -> None:
    problems = []
    if not 0 < c.compaction_target < c.soft_threshold < c.hard_threshold <= 1:
        problems.append("need 0 < compaction_target < soft_threshold < hard_threshold <= 1")
    if c.protected_turns < 0 or c.segment_max_turns < 1 or c.segment_max_tokens < 50:
        problems.append("protected_turns ≥ 0, segment_max_turns ≥ 1, segment_max_tokens ≥ 50")
    if not 0 < c.summary_ratio <= 1 or c.summary_max_tokens < 20:
        problems.append("0 < summary_ratio ≤ 1 and summary_max_tokens ≥ 20")
    if not 0 < c.window_share <= 1 or not 0 <= c.stable_share <= 0.5:
        problems.append("0 < window_share ≤ 1 and 0 ≤ stable_share ≤ 0.5")
    if not 0 <= c.recall_share <= 1 or not 0 <= c.recall_confidence <= 2:
        problems.append("0 ≤ recall_share ≤ 1 and 0 ≤ recall_confidence ≤ 2")
    if not 0 <= c.recall_reach <= 2:
        problems.append("0 ≤ recall_reach ≤ 2")
    if c.tag_summary_max_tokens < 20 or c.gap_hours <= 0 or c.tagger_lookback < 0:
        problems.append("tag_summary_max_tokens ≥ 20, gap_hours > 0, tagger_lookback ≥ 0")
    if not 0 < c.tag_split_share <= 1 or c.tag_split_min_turns < 1:
        problems.append("0 < tag_split_share ≤ 1 and tag_split_min_turns ≥ 1")
    if problems:
        raise ConfigError("; ".join(problems))


def config_for(memory_settings: dict[str, Any] | None) -> MemoryConfig:
    """Effective settings of an account; invalid stored settings fall back to defaults."""
    try:
        return config_validate(memory_settings or {})
    except ConfigError:
        return MemoryConfig()


def config_to_dict(config: MemoryConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_to_yaml(config: MemoryConfig) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def config_from_yaml(text: str) -> MemoryConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}") from exc
    return config_validate(data or {})
