"""GET-parameter forms of the dashboard pages: date ranges, session filters, sort.

Bad values never fail a page: the form reports them and the page falls back to
its defaults for the fields that did not validate.
"""

from __future__ import annotations

from datetime import date, timedelta

from django import forms

from proxy_app.formats.types import FORMATS
from telemetry_app.selectors import SESSION_SORTS, DateRange, SessionFilters
from vcloud.accounts.models import VCKey

DEFAULT_DAYS = 30
FORMAT_LABELS = {
    "anthropic": "Anthropic Messages",
    "openai_chat": "OpenAI Chat",
    "openai_responses": "OpenAI Responses",
    "gemini": "Gemini",
}


class DateInput(forms.DateInput):
    input_type = "date"


class DateRangeForm(forms.Form):
    start = forms.DateField(required=False, widget=DateInput, label="From")
    end = forms.DateField(required=False, widget=DateInput, label="To")

    def _valid(self, name: str) -> date | None:
        if not self.is_bound or name in self.errors:
            return None
        value = self.cleaned_data.get(name) if hasattr(self, "cleaned_data") else None
        return value if isinstance(value, date) else None

    def date_range(self, *, today: date) -> DateRange:
        """The chosen days (UTC, inclusive; swapped if given backwards); the last 30
        days by default."""
        self.is_valid()
        end = self._valid("end") or today
        start = self._valid("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        dates = DateRange(min(start, end), max(start, end))
        self._show(dates)
        return dates

    def _show(self, dates: DateRange) -> None:
        """Let the picker show the days in force, not blanks, where none were given."""
        if not self.is_bound:
            self.initial = {"start": dates.start, "end": dates.end}
            return
        data = self.data.copy()
        for name in ("start", "end"):
            if not data.get(name) or self._valid(name):
                data[name] = getattr(dates, name).isoformat()
        self.data = data


def range_presets(*, today: date) -> list[dict[str, object]]:
    """Quick picks of the date-range picker."""
    return [
        {"label": label, "start": today - timedelta(days=days - 1), "end": today}
        for label, days in (("Today", 1), ("7 days", 7), ("30 days", 30), ("90 days", 90))
    ]


class SessionFilterForm(DateRangeForm):
    q = forms.CharField(required=False, max_length=200, label="Search")
    key = forms.ChoiceField(required=False, label="Key")
    format = forms.ChoiceField(required=False, label="Format")
    model = forms.ChoiceField(required=False, label="Model")
    sort = forms.ChoiceField(required=False)

    field_order = ["q", "key", "format", "model", "start", "end", "sort"]

    def __init__(self, data: object, *, keys: list[VCKey], models: list[str]) -> None:
        super().__init__(data)  # type: ignore[arg-type]
        self.fields["key"].choices = [("", "All keys")] + [
            (str(k.pk), f"{k.name} ({k.prefix}…)") for k in keys
        ]
        self.fields["format"].choices = [("", "All formats")] + [
            (f, FORMAT_LABELS.get(f, f)) for f in FORMATS
        ]
        self.fields["model"].choices = [("", "All models")] + [(m, m) for m in models]
        self.fields["sort"].choices = [
            (f"{prefix}{name}", name) for name in SESSION_SORTS for prefix in ("", "-")
        ]

    def filters(self) -> SessionFilters:
        self.is_valid()
        data = {
            name: self.cleaned_data.get(name)
            for name in ("q", "key", "format", "model", "start", "end", "sort")
            if name not in self.errors and hasattr(self, "cleaned_data")
        }
        key = data.get("key")
        return SessionFilters(
            q=str(data.get("q") or "").strip(),
            key_id=int(key) if key else None,
            format=str(data.get("format") or ""),
            model=str(data.get("model") or ""),
            start=self._valid("start"),
            end=self._valid("end"),
            sort=str(data.get("sort") or SessionFilters.sort),
        )


SESSION_COLUMNS = (
    ("title", "Session"),
    ("turns", "Turns"),
    ("requests", "Requests"),
    ("client", "Virtual tokens"),
    ("upstream", "Actual tokens"),
    ("updated", "Last activity"),
)


def sort_columns(current: str) -> list[dict[str, str]]:
    """Header links of the sessions table: a click sorts by the column, a second
    click reverses it; text sorts A→Z first, numbers and dates largest first."""
    name, descending = current.removeprefix("-"), current.startswith("-")
    columns = []
    for column, label in SESSION_COLUMNS:
        first = column if column == "title" else f"-{column}"
        if column == name:
            following = column if descending else f"-{column}"
            arrow = " ↓" if descending else " ↑"
        else:
            following, arrow = first, ""
        columns.append({"name": column, "label": label, "sort": following, "arrow": arrow})
    return columns
