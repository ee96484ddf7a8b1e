"""When a question is about, and whether it asks for the first or the latest.

Contract:

- ``date_range_for(query_text, today)`` returns the inclusive ``(start, end)``
  dates the question points at, or None when it names no time. ``today`` is
  the date the question is asked (LongMemEval's ``question_date``); relative
  phrases count back from it and a range never ends after it. Only the past is
  read: retrieval looks for what was said, not for plans.

  ================================  =============================================
  phrase                            range
  ================================  =============================================
  today, this morning, earlier      today
  today, tonight
  yesterday, last night             the day before
  the day before yesterday          two days before
  N days/weeks/months/years ago     a window around today minus N units, half a
                                    unit each side (one or two days: exact)
  a few / a couple of … ago         one unit ago back to N+1 units ago
  the past N days, the last week,   from N units ago to today
  this past month, last 3 days
  last Saturday, this past Sunday   the latest such weekday before today
  on Saturday, this Saturday        the latest such weekday up to today
  last weekend / this weekend       the latest finished weekend / the latest one
  last week                         Monday of the previous week to yesterday
  last month, last year             the previous calendar month / year
  this week/month/year, earlier     its first day to today
  this year
  in May, in May 2023, last May     that month (without a year: the latest May
                                    that has begun)
  on May 3rd, 3 May, 2023-05-03     that day (without a year: the latest one)
  on the 5th                        that day of this month, or of the last one
  last summer, in the winter        the season (northern hemisphere)
  in 2022                           that year
  since/after X, before/until X     from X to today / from 1900 to the day before X
  ================================  =============================================

  Duration questions ("how many days ago…", "how many weeks passed between…",
  "how long ago…") return None: their answer spans two events, and a range
  would push one of them down. Phrases the rules miss but that carry a day
  number ("March the 3rd") go to ``dateparser`` as a last resort, imported
  lazily because it is slow to import.

- ``order_hint_for(query_text)`` returns ``"first"`` when the question asks for
  the earliest occurrence ("the first time", "what did I do first",
  "originally"), ``"last"`` for the latest ("most recently", "the last time",
  "what did I do last", and for what holds now: "currently", "these days",
  "still"), else None. "last" or "first" before a time word ("last week",
  "first of May") is a date, not an order. Explicit words win over the
  "holds now" ones; among explicit words the earliest in the text wins.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

DateRange = tuple[date, date]
_Found = tuple[DateRange, int]  # the range and where its phrase starts in the text
_Rule = Callable[[str, date], _Found | None]

EARLIEST = date(1900, 1, 1)

_NUMBER_WORDS: dict[str, int] = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_FUZZY_WORDS: dict[str, int] = {"couple": 2, "few": 3, "several": 4}
_NUM = (
    r"(?P<n>\d{1,3}|a\s+couple(?:\s+of)?|couple\s+of|a\s+few|few|several"
    r"|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
)
_UNIT = r"(?P<unit>day|week|fortnight|month|year)s?\b"
_HALF_WIDTH_DAYS = {"day": 1, "week": 3, "fortnight": 7, "month": 15, "year": 182}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_NAMES = "|".join(_WEEKDAYS)
_MONTHS: tuple[str, ...] = ("january", "february", "march", "april", "may", "june")
_MONTHS += ("july", "august", "september", "october", "november", "december")
_MONTH_FULL = "|".join((*_MONTHS, "sept"))
_MONTH_ANY = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}

_DURATION = re.compile(
    r"\bhow\s+(?:many|much)\s+(?:days|weeks|months|years|time)\b.*?"
    r"\b(?:ago|before|after|between|since|passed|elapsed|earlier|later|take|took)\b"
    r"|\bhow\s+long\s+(?:ago|before|after|since|has\s+it\s+been|had\s+it\s+been|did\s+it\s+take)\b"
)
_BOUND = re.compile(r"(?<!day )\b(?P<kw>since|after|before|until|till|prior\s+to)\s+")
_ISO_DATE = re.compile(r"\b(?P<y>(?:19|20)\d{2})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})\b")
_US_DATE = re.compile(r"\b(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4}|\d{2})\b")
_ORDINALS: tuple[str, ...] = ("first", "second", "third", "fourth", "fifth", "sixth")
_ORDINALS += ("seventh", "eighth")
_ORDINALS += ("ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth")
_ORDINALS += ("sixteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth")
_ORDINALS += tuple(f"twenty-{word}" for word in _ORDINALS[:9]) + ("thirtieth", "thirty-first")
_DAY = r"(?P<d>\d{1,2}(?:st|nd|rd|th)?|" + "|".join(sorted(_ORDINALS, key=len, reverse=True)) + ")"
_YEAR_AFTER = r"(?:,?\s+(?:of\s+)?(?P<y>\d{4})\b)?"
_MONTH_DAY = re.compile(
    rf"\b(?P<mon>{_MONTH_ANY})\.?\s+(?:the\s+)?{_DAY}\b(?!\s*[:/])(?!\s+(?:day|week)){_YEAR_AFTER}"
)
_DAY_MONTH = re.compile(rf"\b(?:the\s+)?{_DAY}\s+(?:of\s+)?(?P<mon>{_MONTH_ANY})\b\.?{_YEAR_AFTER}")
_DAY_OF_MONTH = re.compile(r"\bon\s+the\s+(?P<d>\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\b)")
_NAMED_DAYS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\bthe\s+day\s+before\s+yesterday\b"), 2),
    (re.compile(r"\byesterday\b|\blast\s+night\b"), 1),
    (re.compile(r"\btoday\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b"), 0),
)
_OTHER_DAY = re.compile(r"\bthe\s+other\s+day\b")
_AGO = re.compile(rf"\b{_NUM}\s+{_UNIT}\s+ago\b")
_SPANS = (
    re.compile(rf"\b(?:the|this)\s+(?:last|past)\s+(?:{_NUM}\s+)?{_UNIT}(?!\s+of\b)"),
    re.compile(rf"\bpast\s+(?:{_NUM}\s+)?{_UNIT}(?!\s+of\b)"),
    re.compile(rf"\blast\s+{_NUM}\s+{_UNIT}"),
)
_WEEKEND = re.compile(r"\b(?P<mod>this\s+past|last|past|previous|this|over\s+the|the)\s+weekend\b")
_WEEKDAY = re.compile(
    rf"\b(?P<mod>this\s+past|last|past|previous|this|on)\s+(?P<wd>{_WEEKDAY_NAMES})\b"
)
_CALENDAR = re.compile(
    r"\b(?P<mod>last|previous|the\s+previous|this|earlier\s+this|earlier\s+in\s+the)"
    r"\s+(?P<unit>week|month|year)\b(?!\s+(?:of|before|after)\b)"
)
_SEASON = re.compile(
    r"\b(?P<mod>this\s+past|last|past|this|in\s+the|during\s+the|over\s+the)"
    r"\s+(?P<s>spring|summer|autumn|fall|winter)\b(?:\s+(?:of\s+)?(?P<y>\d{4})\b)?"
)
_MONTH = re.compile(
    r"\b(?P<mod>in|during|since|before|after|until|of|last|this|early|mid|late|around"
    r"|throughout)\s+(?:(?:early|mid|late|the\s+(?:end|beginning|start|middle)\s+of)\s+|mid-)?"
    rf"(?P<mon>{_MONTH_FULL})\b(?:,?\s+(?P<y>\d{{4}})\b)?"
)
_MONTH_MORE = re.compile(
    r"\s*(?:,|and|or|to|through|until|-)\s*(?:and\s+|or\s+)?(?:early\s+|late\s+|mid-?)?"
    rf"(?P<mon>{_MONTH_FULL})\b(?:,?\s+(?P<y>\d{{4}})\b)?"
)
_MONTH_YEAR = re.compile(rf"\b(?P<mon>{_MONTH_ANY})\.?,?\s+(?P<y>(?:19|20)\d{{2}})\b")
_YEAR = re.compile(r"\b(?:in|during|since|before|after|of|throughout)\s+(?P<y>(?:19|20)\d{2})\b")
_FALLBACK_TRIGGER = re.compile(rf"\b(?:{_MONTH_ANY}|{_WEEKDAY_NAMES})\b")
_ORDINAL_WORD = re.compile(
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh"
    r"|twelfth|\w+teenth|twentieth|thirtieth)\b|\d"
)


# ------------------------------------------------------------------ date ranges


def date_range_for(query_text: str, today: date) -> DateRange | None:
    """The inclusive dates ``query_text`` asks about, relative to ``today``; None if none."""
    text = _normalise(query_text)
    if not text or _DURATION.search(text):
        return None
    bounded = _bounded(text, today)
    if bounded is not None:
        return bounded
    for rule in _RULES:
        found = rule(text, today)
        if found is not None:
            return found[0]
    return _dateparser_day(text, today)


def _normalise(text: str) -> str:
    return " ".join(text.lower().replace("’", "'").split())


def _bounded(text: str, today: date) -> DateRange | None:
    """``since X`` / ``before X``: open-ended ranges around a date phrase right after the word."""
    for match in _BOUND.finditer(text):
        rest = text[match.start() :]
        keyword_end = match.end() - match.start()
        for rule in _RULES:
            found = rule(rest, today)
            # the phrase must follow the word ("since May"), or include it ("since may")
            if found is None or rest[keyword_end : max(keyword_end, found[1])].strip() not in (
                "",
                "the",
            ):
                continue
            (start, end), _ = found
            if match["kw"] in ("since", "after"):
                first = start if match["kw"] == "since" else end + timedelta(days=1)
                return (min(first, today), today)
            return (EARLIEST, max(EARLIEST, start - timedelta(days=1)))
    return None


def _explicit_dates(text: str, today: date) -> _Found | None:
    for pattern in (_ISO_DATE, _US_DATE):
        match = pattern.search(text)
        if match:
            year = int(match["y"]) + (2000 if len(match["y"]) == 2 else 0)
            day = _safe_date(year, int(match["m"]), int(match["d"]))
            if day is not None:
                return (day, day), match.start()
    return None


def _month_day(text: str, today: date) -> _Found | None:
    for pattern in (_MONTH_DAY, _DAY_MONTH):
        match = pattern.search(text)
        if not match:
            continue
        month, number = _month_number(match["mon"]), _day_number(match["d"])
        if match["y"]:
            day = _safe_date(int(match["y"]), month, number)
        else:
            day = _latest_day(today, month, number)
        if day is not None:
            return (day, day), match.start()
    return None


def _day_of_month(text: str, today: date) -> _Found | None:
    match = _DAY_OF_MONTH.search(text)
    if not match:
        return None
    number = int(match["d"])
    day = _safe_date(today.year, today.month, number)
    if day is None or day > today:
        previous = today.replace(day=1) - timedelta(days=1)
        day = _safe_date(previous.year, previous.month, number)
    return None if day is None else ((day, day), match.start())


def _named_day(text: str, today: date) -> _Found | None:
    for pattern, days_back in _NAMED_DAYS:
        match = pattern.search(text)
        if match:
            day = today - timedelta(days=days_back)
            return (day, day), match.start()
    match = _OTHER_DAY.search(text)
    if match:
        return (today - timedelta(days=7), today - timedelta(days=1)), match.start()
    return None


def _ago(text: str, today: date) -> _Found | None:
    match = _AGO.search(text)
    if not match:
        return None
    count, fuzzy = _count(match["n"])
    unit = match["unit"]
    if fuzzy:
        return (_back(today, unit, count + 1), _back(today, unit, 1)), match.start()
    centre = _back(today, unit, count)
    half = 0 if unit == "day" and count <= 2 else _HALF_WIDTH_DAYS[unit]
    span = (centre - timedelta(days=half), min(today, centre + timedelta(days=half)))
    return span, match.start()


def _past_span(text: str, today: date) -> _Found | None:
    for pattern in _SPANS:
        match = pattern.search(text)
        if match:
            count, fuzzy = _count(match["n"]) if match["n"] else (1, False)
            reach = count + 1 if fuzzy else count
            return (_back(today, match["unit"], reach), today), match.start()
    return None


def _weekend(text: str, today: date) -> _Found | None:
    match = _WEEKEND.search(text)
    if not match:
        return None
    if match["mod"] == "this" and today.weekday() < 5:
        return None  # the coming weekend: a plan, not a memory
    if _is_strict(match["mod"]):
        sunday = today - timedelta(days=(today.weekday() - 6) % 7 or 7)
        return (sunday - timedelta(days=1), sunday), match.start()
    saturday = today - timedelta(days=(today.weekday() - 5) % 7)
    return (saturday, min(today, saturday + timedelta(days=1))), match.start()


def _weekday(text: str, today: date) -> _Found | None:
    match = _WEEKDAY.search(text)
    if not match:
        return None
    back = (today.weekday() - _WEEKDAYS.index(match["wd"])) % 7
    if back and match["mod"] == "this":
        return None  # "this Friday", said on a Tuesday, is ahead
    if back == 0 and _is_strict(match["mod"]):
        back = 7
    day = today - timedelta(days=back)
    return (day, day), match.start()


def _calendar(text: str, today: date) -> _Found | None:
    match = _CALENDAR.search(text)
    if not match:
        return None
    unit = match["unit"]
    current = _period_start(today, unit)
    if "this" in match["mod"] or "earlier" in match["mod"]:
        return (current, today), match.start()
    previous = _period_start(current - timedelta(days=1), unit)
    # "last week" is the previous calendar week for some, the past seven days for others
    end = today - timedelta(days=1) if unit == "week" else current - timedelta(days=1)
    return (previous, end), match.start()


def _season(text: str, today: date) -> _Found | None:
    match = _SEASON.search(text)
    if not match:
        return None
    first_month = _SEASON_START[match["s"]]
    if match["y"]:
        start = date(int(match["y"]), first_month, 1)
    else:
        start = date(today.year, first_month, 1)
        if start > today:
            start = date(today.year - 1, first_month, 1)
        if _is_strict(match["mod"]) and _months_after(start, 3) > today:
            start = date(start.year - 1, first_month, 1)
    end = _months_after(start, 3) - timedelta(days=1)
    return (start, _clip(start, end, today)), match.start()


def _month(text: str, today: date) -> _Found | None:
    """A month, or a list of them ("in January and March"): first to last, whole months."""
    match = _MONTH.search(text) or _MONTH_YEAR.search(text)
    if not match:
        return None
    strict = match.groupdict().get("mod") == "last"
    named = [(match["mon"], match["y"])]
    end = match.end()
    while more := _MONTH_MORE.match(text, end):
        named.append((more["mon"], more["y"]))
        end = more.end()
    shared_year = next((year for _, year in reversed(named) if year), None)  # "March and May 2022"
    spans = [_month_span(name, year or shared_year, strict, today) for name, year in named]
    start = min(span[0] for span in spans)
    return (start, _clip(start, max(span[1] for span in spans), today)), match.start()


def _month_span(name: str, year_text: str | None, strict: bool, today: date) -> DateRange:
    """A named month; without a year, the latest that has begun (for ``last``: ended)."""
    month = _month_number(name)
    if year_text:
        year = int(year_text)
    else:
        year = today.year if month <= today.month else today.year - 1
        if strict and month == today.month:
            year -= 1
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _year(text: str, today: date) -> _Found | None:
    match = _YEAR.search(text)
    if not match:
        return None
    start, end = date(int(match["y"]), 1, 1), date(int(match["y"]), 12, 31)
    return (start, _clip(start, end, today)), match.start()


_RULES: tuple[_Rule, ...] = (
    _explicit_dates,
    _month_day,
    _named_day,
    _ago,
    _past_span,
    _weekend,
    _weekday,
    _calendar,
    _season,
    _month,
    _year,
    _day_of_month,
)


def _dateparser_day(text: str, today: date) -> DateRange | None:
    """Last resort for a day the rules missed; only phrases that carry a day number."""
    if not (_FALLBACK_TRIGGER.search(text) and _ORDINAL_WORD.search(text)):
        return None
    from dateparser.search import search_dates  # slow to import: only when the rules gave up

    settings = {
        "RELATIVE_BASE": datetime(today.year, today.month, today.day),
        "PREFER_DATES_FROM": "past",
    }
    found = search_dates(text, languages=["en"], settings=settings) or []
    for phrase, moment in found:
        # without a day number dateparser fills in today's day: "in march" → march 30
        if _ORDINAL_WORD.search(phrase) and moment.date() <= today:
            return (moment.date(), moment.date())
    return None


# ------------------------------------------------------------------ calendar helpers


def _count(word: str) -> tuple[int, bool]:
    """How many units a number phrase says, and whether it is vague ("a few")."""
    if word.isdigit():
        return int(word), False
    for fuzzy, value in _FUZZY_WORDS.items():
        if fuzzy in word:
            return value, True
    return _NUMBER_WORDS.get(word, 1), False


def _is_strict(modifier: str) -> bool:
    """``last`` / ``past`` / ``previous`` exclude the current day, weekend or season."""
    return modifier.split()[-1] in ("last", "past", "previous")


def _back(day: date, unit: str, count: int) -> date:
    if unit == "day":
        return day - timedelta(days=count)
    if unit in ("week", "fortnight"):
        return day - timedelta(days=count * (14 if unit == "fortnight" else 7))
    return _months_after(day, -count * (12 if unit == "year" else 1))


def _months_after(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return date(year, month + 1, min(day.day, last))


def _period_start(day: date, unit: str) -> date:
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return date(day.year, 1, 1)


def _clip(start: date, end: date, today: date) -> date:
    """A range that has begun ends today at the latest."""
    return min(end, today) if start <= today else end


def _month_number(word: str) -> int:
    word = word.lower().rstrip(".")
    return next(i for i, name in enumerate(_MONTHS, start=1) if name.startswith(word[:3]))


def _day_number(word: str) -> int:
    if word in _ORDINALS:
        return _ORDINALS.index(word) + 1
    return int(word.rstrip("stndrh"))


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _latest_day(today: date, month: int, day: int) -> date | None:
    """The latest ``month``/``day`` on or before ``today`` (this year or the one before)."""
    for year in (today.year, today.year - 1):
        found = _safe_date(year, month, day)
        if found is not None and found <= today:
            return found
    return _safe_date(today.year - 1, month, day)


# ------------------------------------------------------------------ order hints

_TIME_AFTER = (
    rf"(?:{_WEEKDAY_NAMES}|{_MONTH_FULL}|night|nights|days?|weeks?|weekend|months?|years?"
    r"|fortnight|summer|winter|spring|fall|autumn|season|semester|quarter|decade|century"
    r"|morning|evening|afternoon|hours?|minutes?|few|couple|several|\d+"
    r"|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
)
_EXPLICIT_ORDER: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:earliest|initially|originally|at\s+first|to\s+begin\s+with)\b"), "first"),
    (re.compile(r"\bfirst\b(?!\s+(?:of|aid|name|class|floor|place)\b)"), "first"),
    (re.compile(r"\b(?:latest|most\s+recent(?:ly)?|last\s+time)\b"), "last"),
    (re.compile(rf"(?<!\bat )\blast\b(?!\s+{_TIME_AFTER}\b)(?!\s+name\b)"), "last"),
)
_HOW_LONG_LAST = re.compile(r"\bhow\s+long\b[^?.!]*\blast\b")
_HOLDS_NOW = re.compile(
    r"\b(?:currently|current|nowadays|these\s+days|at\s+the\s+moment|right\s+now|now"
    r"|still|anymore|any\s+more|recently|lately)\b"
)


def order_hint_for(query_text: str) -> str | None:
    """``"first"``, ``"last"`` or None: which end of the matching history the question wants."""
    text = _normalise(query_text)
    text = _HOW_LONG_LAST.sub(" ", text)  # "how long did it last": the verb
    hits = [
        (match.start(), hint)
        for pattern, hint in _EXPLICIT_ORDER
        if (match := pattern.search(text)) is not None
    ]
    if hits:
        return min(hits)[1]
    return "last" if _HOLDS_NOW.search(text) else None
