from __future__ import annotations

import re
import secrets
from typing import Any

import yaml
from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

from memory_app.config import (
    PRESETS,
    MemoryConfig,
    TagRule,
    config_from_yaml,
    config_validate,
)
from memory_app.errors import ConfigError
from vcloud.accounts.models import Account
from vcloud.accounts.upstreams import upstream_problem


class SignUpForm(UserCreationForm):
    email = forms.EmailField(required=True, help_text="For account notices only.")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip().lower()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this email already exists.")
        return email


class KeyCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        initial="default",
        help_text="A label, e.g. the app or machine that uses the key.",
    )
    # One per rendered form, so a reload that re-posts it creates no second key.
    nonce = forms.CharField(max_length=64, widget=forms.HiddenInput, required=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["nonce"].initial = secrets.token_hex(16)


def _upstream_field(provider: str) -> forms.URLField:
    return forms.URLField(
        required=False,
        assume_scheme="https",
        label=f"{provider} upstream",
        help_text=f"Base URL for {provider}-format requests; empty uses the server default.",
    )


class AccountSettingsForm(forms.ModelForm):
    upstream_anthropic = _upstream_field("Anthropic")
    upstream_openai = _upstream_field("OpenAI")
    upstream_gemini = _upstream_field("Gemini")

    class Meta:
        model = Account
        fields = (
            "context_ceiling",
            "cache_aware_layout",
            "capture_payloads",
            "upstream_anthropic",
            "upstream_openai",
            "upstream_gemini",
        )

    def clean_context_ceiling(self) -> int:
        value = self.cleaned_data["context_ceiling"]
        if value < 1000:
            raise forms.ValidationError("The ceiling must be at least 1,000 tokens.")
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name in ("upstream_anthropic", "upstream_openai", "upstream_gemini"):
            problem = upstream_problem(cleaned.get(name) or "")
            if problem:
                self.add_error(name, problem)
        return cleaned


# ------------------------------------------------------------- memory settings

# name → (label, help text). Thresholds are shares of the account's context ceiling.
_MEMORY_HELP: dict[str, tuple[str, str]] = {
    "soft_threshold": (
        "Soft threshold",
        "Fill of the context ceiling (0–1) above which compaction starts in the background.",
    ),
    "hard_threshold": (
        "Hard threshold",
        "Fill above which the next request waits for compaction to finish.",
    ),
    "compaction_target": (
        "Compaction target",
        "Fill that compaction brings the verbatim window back down to.",
    ),
    "protected_turns": (
        "Protected turns",
        "The most recent turns stay verbatim and are never compacted.",
    ),
    "window_share": (
        "Window share",
        "Recent history kept verbatim beyond the protected turns between compactions, as "
        "a share of the ceiling (0–1; 1 = off, the default). Lower leaves more room for "
        "recall but breaks the provider's prompt cache more often.",
    ),
    "stable_share": (
        "Stable block share",
        "Most of the ceiling (0–0.5) the cacheable overview of topics and tag summaries "
        "may take; the rest goes to what the new message needs.",
    ),
    "recall_share": (
        "Recall share",
        "Most of the ceiling (0–1) that what is recalled for the new message may take "
        "with the cache-aware layout: it is paid at the full input price on every "
        "request, after the cached prefix…",
    ),
    "recall_confidence": (
        "Recall confidence",
        "…unless the best match in older memory is this strong (0–2, as a share of a "
        "match that every signal ranks first; 0 = never): then recall takes all the room…",
    ),
    "recall_reach": (
        "Recall reach",
        "…or at least this strong (same scale) and 1.5 × the best match in the recent "
        "history sent verbatim: the message reaches back rather than going on.",
    ),
    "segment_max_tokens": ("Segment max tokens", "A segment closes at this many tokens…"),
    "segment_max_turns": ("Segment max turns", "…or at this many turns, whichever comes first."),
    "gap_hours": ("Gap hours", "A longer pause between turns starts a new segment."),
    "summary_ratio": ("Summary ratio", "Summary size as a share of its segment (0–1)."),
    "summary_max_tokens": ("Summary max tokens", "Upper bound on one segment's summary."),
    "tag_summary_max_tokens": (
        "Tag summary max tokens",
        "Upper bound on the summary of everything under one tag.",
    ),
    "tagger_lookback": (
        "Tagger lookback",
        "Earlier turns the tagger reads as context when tagging a new one.",
    ),
    "tag_split_share": (
        "Tag split share",
        "A tag on more than this share of the turns (0–1) is split into narrower tags…",
    ),
    "tag_split_min_turns": ("Tag split min turns", "…once it is on at least this many turns."),
}
_MEMORY_GROUPS = {
    "Compaction": (
        "soft_threshold",
        "hard_threshold",
        "compaction_target",
        "protected_turns",
        "window_share",
        "stable_share",
        "recall_share",
        "recall_confidence",
        "recall_reach",
    ),
    "Segments and summaries": (
        "segment_max_tokens",
        "segment_max_turns",
        "summary_ratio",
        "summary_max_tokens",
        "tag_summary_max_tokens",
        "gap_hours",
    ),
    "Tags": ("tag_split_share", "tag_split_min_turns", "tagger_lookback"),
}
_FRACTIONS = {
    "soft_threshold",
    "hard_threshold",
    "compaction_target",
    "window_share",
    "stable_share",
    "recall_share",
    "recall_confidence",
    "recall_reach",
    "summary_ratio",
    "tag_split_share",
}
CUSTOM = "custom"
YAML_MAX_BYTES = 64 * 1024


def _memory_field(name: str) -> forms.Field:
    label, help_text = _MEMORY_HELP[name]
    if isinstance(getattr(MemoryConfig(), name), int):
        return forms.IntegerField(label=label, help_text=help_text)
    step = "0.01" if name in _FRACTIONS else "any"
    widget = forms.NumberInput(attrs={"step": step})
    return forms.FloatField(label=label, help_text=help_text, widget=widget)


def tag_rules_parse(text: str) -> list[dict[str, Any]]:
    """Lines of ``pattern priority ttl_turns`` (the numbers optional, 0 by
    default; blank lines and ``#`` comments skipped) as tag-rule dicts."""
    rules: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        problem = _tag_rule_problem(parts, seen)
        if problem:
            problems.append(f"Line {number}: {problem}")
            continue
        seen[parts[0]] = number
        priority, ttl = (int(p) for p in [*parts[1:], "0", "0"][:2])
        rules.append({"pattern": parts[0], "priority": priority, "ttl_turns": ttl})
    if problems:
        raise forms.ValidationError(problems)
    return rules


def _tag_rule_problem(parts: list[str], seen: dict[str, int]) -> str:
    if len(parts) > 3:
        return f"expected “pattern priority ttl_turns”, got {' '.join(parts)!r}."
    if parts[0] in seen:
        return f"the pattern {parts[0]!r} is already on line {seen[parts[0]]}."
    for what, value in zip(("priority", "ttl_turns"), parts[1:], strict=False):
        try:
            number = int(value)
        except ValueError:
            return f"{what} must be a whole number, not {value!r}."
        if what == "ttl_turns" and number < 0:
            return "ttl_turns must be 0 (never expires) or more."
    return ""


def tag_rules_text(rules: list[TagRule]) -> str:
    return "".join(f"{r.pattern} {r.priority} {r.ttl_turns}\n" for r in rules)


def preset_config(name: str) -> MemoryConfig:
    return config_validate({"preset": name})


def preset_matching(config: MemoryConfig) -> str:
    """The preset whose values ``config`` has (tag rules aside), else "custom"."""
    values = _memory_values(config)
    for name in PRESETS:
        if _memory_values(preset_config(name)) == values:
            return name
    return CUSTOM


def _memory_values(config: MemoryConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _MEMORY_HELP}


def stored_memory_problem(memory_settings: Any) -> str:
    """Why the stored settings do not validate (so the defaults apply), or ""."""
    try:
        config_validate(memory_settings or {})
    except ConfigError as exc:
        return "; ".join(_labelled(p) for p in str(exc).split("; "))
    return ""


def _labelled(problem: str) -> str:
    """A ConfigError problem with setting names replaced by the form's labels."""
    for name, (label, _) in sorted(_MEMORY_HELP.items(), key=lambda kv: -len(kv[0])):
        problem = re.sub(rf"\b{name}\b", label, problem)
    problem = problem.replace("<=", "≤")
    return problem[:1].upper() + problem[1:]


class MemorySettingsForm(forms.Form):
    """The numeric memory settings and the tag rules; ``clean`` checks them with
    ``config_validate`` and leaves the result in ``self.config``."""

    preset = forms.ChoiceField(
        choices=[(CUSTOM, "Custom"), *((name, name) for name in PRESETS)],
        initial=CUSTOM,
        required=False,
        help_text="Load a preset's values into the form, then review and save.",
    )
    tag_rules = forms.CharField(
        required=False,
        label="Tag rules",
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}),
        help_text="One rule a line: <code>pattern priority ttl_turns</code>, e.g. "
        "<code>proj-* 5 40</code>. Patterns take shell wildcards (<code>* ? [ ]</code>); "
        "higher priority is assembled first; ttl_turns &gt; 0 drops a tag that many turns "
        "after its last use, 0 keeps it.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in _MEMORY_HELP:
            self.fields[name] = _memory_field(name)
        self.config: MemoryConfig | None = None

    @classmethod
    def for_config(cls, config: MemoryConfig, *, preset: str | None = None) -> MemorySettingsForm:
        """An unbound form showing ``config``."""
        initial: dict[str, Any] = _memory_values(config)
        initial["tag_rules"] = tag_rules_text(config.tag_rules)
        initial["preset"] = preset or preset_matching(config)
        return cls(initial=initial)

    def groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        return [(title, [self[n] for n in names]) for title, names in _MEMORY_GROUPS.items()]

    def clean_tag_rules(self) -> list[dict[str, Any]]:
        return tag_rules_parse(self.cleaned_data.get("tag_rules") or "")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned  # fix single values before judging how they fit together
        data = {name: cleaned[name] for name in _MEMORY_HELP}
        try:
            self.config = config_validate({**data, "tag_rules": cleaned["tag_rules"]})
        except ConfigError as exc:
            for problem in str(exc).split("; "):
                self.add_error(None, _labelled(problem))
                self._flag(problem)
        return cleaned

    def _flag(self, problem: str) -> None:
        # Mark the inputs a cross-field problem names, so they show as invalid.
        for name in _MEMORY_HELP:
            if re.search(rf"\b{name}\b", problem):
                self.fields[name].widget.attrs["aria-invalid"] = "true"

    def preset_loaded(self) -> MemorySettingsForm:
        """An unbound form with the chosen preset's values and the posted tag
        rules; this form, with an error, when no preset was chosen."""
        name = self.data.get("preset", CUSTOM)
        if name not in PRESETS:
            if "preset" not in self.errors:
                self.add_error("preset", "Choose a preset to load its values.")
            return self
        config = preset_config(name)
        form = MemorySettingsForm.for_config(config, preset=name)
        form.initial["tag_rules"] = self.data.get("tag_rules", "")
        return form


class MemoryImportForm(forms.Form):
    yaml_file = forms.FileField(
        required=False, label="YAML file", help_text="A file saved with “Export YAML”."
    )
    yaml_text = forms.CharField(
        required=False,
        label="…or paste YAML",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config: MemoryConfig | None = None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload, text = cleaned.get("yaml_file"), cleaned.get("yaml_text") or ""
        if upload and text.strip():
            raise forms.ValidationError("Choose a file or paste YAML, not both.")
        if upload:
            text = _upload_text(upload)
        if not text.strip():
            raise forms.ValidationError("Choose a YAML file or paste YAML to import.")
        if len(text.encode()) > YAML_MAX_BYTES:
            raise forms.ValidationError("That YAML is too large (at most 64 KB).")
        _refuse_aliases(text)
        try:
            self.config = config_from_yaml(text)
        except ConfigError as exc:
            # Problems keep the setting names: they are the keys of the YAML.
            problems = [p[:1].upper() + p[1:] for p in str(exc).split("; ")]
            raise forms.ValidationError(problems) from exc
        return cleaned


def _upload_text(upload: Any) -> str:
    if upload.size > YAML_MAX_BYTES:
        raise forms.ValidationError("That file is too large (at most 64 KB).")
    try:
        return str(upload.read().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise forms.ValidationError("That file is not UTF-8 text.") from exc


def _refuse_aliases(text: str) -> None:
    # Anchors and aliases let a few bytes expand into huge values (and huge
    # error messages); an exported file never has them.
    try:
        if any(
            isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)
        ):
            raise forms.ValidationError("YAML anchors and aliases (&, *) are not supported.")
    except yaml.YAMLError:
        pass  # config_from_yaml reports the syntax error
