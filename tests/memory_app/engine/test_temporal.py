from __future__ import annotations

from datetime import date

import pytest

from memory_app.engine.temporal import EARLIEST, date_range_for, order_hint_for

TODAY = date(2023, 5, 30)  # a Tuesday, like a LongMemEval question_date


def d(month: int, day: int, year: int = 2023) -> date:
    return date(year, month, day)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What did I buy yesterday?", (d(5, 29), d(5, 29))),
        ("What did I cook last night?", (d(5, 29), d(5, 29))),
        ("What happened the day before yesterday?", (d(5, 28), d(5, 28))),
        ("What did I do this morning?", (d(5, 30), d(5, 30))),
        ("What did I do last week?", (d(5, 22), d(5, 29))),
        ("What did I read this week?", (d(5, 29), d(5, 30))),
        ("How did I feel last month?", (d(4, 1), d(4, 30))),
        ("What did I start earlier this year?", (d(1, 1), d(5, 30))),
        ("Where did I travel last year?", (d(1, 1, 2022), d(12, 31, 2022))),
        ("Where did I go two weeks ago?", (d(5, 13), d(5, 19))),
        ("What did I eat 2 days ago?", (d(5, 28), d(5, 28))),
        ("What happened 10 days ago?", (d(5, 19), d(5, 21))),
        ("What did I buy a month ago?", (d(4, 15), d(5, 15))),
        ("I mentioned a book a few days ago, which one?", (d(5, 26), d(5, 29))),
        ("What did I read in the past two weeks?", (d(5, 16), d(5, 30))),
        ("What did I watch over the last 3 days?", (d(5, 27), d(5, 30))),
        ("What did I do in May?", (d(5, 1), d(5, 30))),
        ("What did I do in August?", (d(8, 1, 2022), d(8, 31, 2022))),
        ("What did I say about the trip in March 2022?", (d(3, 1, 2022), d(3, 31, 2022))),
        ("What did I eat on May 3rd?", (d(5, 3), d(5, 3))),
        ("What did I cook on the third of March?", (d(3, 3), d(3, 3))),
        ("Whom did I meet on 12 December?", (d(12, 12, 2022), d(12, 12, 2022))),
        ("What happened on 2023-04-01?", (d(4, 1), d(4, 1))),
        ("Where did I go last Saturday?", (d(5, 27), d(5, 27))),
        ("What did I do on Tuesday?", (d(5, 30), d(5, 30))),
        ("What did I do last Tuesday?", (d(5, 23), d(5, 23))),
        ("Where was the party last weekend?", (d(5, 27), d(5, 28))),
        ("Where did I travel last summer?", (d(6, 1, 2022), d(8, 31, 2022))),
        ("What did I buy in 2022?", (d(1, 1, 2022), d(12, 31, 2022))),
        ("What did I do on the 5th?", (d(5, 5), d(5, 5))),
        ("What have I learned since April?", (d(4, 1), d(5, 30))),
        ("What did I buy before May 10?", (EARLIEST, d(5, 9))),
        ("What did I do after work last Friday?", (d(5, 26), d(5, 26))),
    ],
)
def test_date_range_for_reads_the_phrase(question: str, expected: tuple[date, date]) -> None:
    assert date_range_for(question, TODAY) == expected


@pytest.mark.parametrize(
    "question",
    [
        "How many days ago did I buy the bike?",
        "How many days before the concert did I buy the tickets?",
        "How many weeks passed between my two dentist visits?",
        "How long ago did I move to Lisbon?",
        "May I ask what my favourite colour is?",
        "What is my cat's name?",
        "",
    ],
)
def test_date_range_for_is_none_without_a_single_time(question: str) -> None:
    assert date_range_for(question, TODAY) is None


def test_a_range_never_ends_after_today() -> None:
    start, end = date_range_for("what did I do this month", TODAY) or (None, None)
    assert (start, end) == (d(5, 1), TODAY)


def test_a_month_day_without_a_year_is_the_latest_one_already_past() -> None:
    assert date_range_for("what happened on June 2nd?", TODAY) == (d(6, 2, 2022), d(6, 2, 2022))


def test_dateparser_reads_what_the_rules_miss() -> None:
    assert date_range_for("what did I do on 3-mar-2023", TODAY) == (d(3, 3), d(3, 3))


@pytest.mark.parametrize(
    ("question", "hint"),
    [
        ("When was the first time I went hiking?", "first"),
        ("What did I do first, the yoga or the pottery class?", "first"),
        ("Which camera did I originally want?", "first"),
        ("What was the earliest trip I mentioned?", "first"),
        ("What did I do most recently?", "last"),
        ("When was the last time I saw my doctor?", "last"),
        ("Which of the two did I do last?", "last"),
        ("What is my current job title?", "last"),
        ("Where do I live these days?", "last"),
        ("What's the latest book I bought?", "last"),
        ("What did I do last week?", None),
        ("What did I buy in the last 3 days?", None),
        ("What did I do on the first of May?", None),
        ("How long did the battery last?", None),
        ("How many days ago did I buy the bike?", None),
        ("What is my cat's name?", None),
    ],
)
def test_order_hint_for_reads_first_and_last(question: str, hint: str | None) -> None:
    assert order_hint_for(question) == hint


def test_an_explicit_order_word_beats_a_holds_now_word() -> None:
    assert order_hint_for("Now, which did I try first?") == "first"


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which airline did I fly with the most in March and April?", (d(3, 1), d(4, 30))),
        ("What did I read in December and January?", (d(12, 1, 2022), d(1, 31))),
        ("What did I do in March, April and May 2022?", (d(3, 1, 2022), d(5, 31, 2022))),
    ],
)
def test_a_list_of_months_spans_first_to_last(question: str, expected: tuple[date, date]) -> None:
    assert date_range_for(question, TODAY) == expected


@pytest.mark.parametrize(
    "question",
    [
        "What should I serve for dinner this weekend?",  # asked on a Tuesday: ahead
        "What should I cook this Friday?",
        "What time do I wake up on Tuesdays and Thursdays?",  # a habit, not a day
    ],
)
def test_plans_and_habits_are_not_dates(question: str) -> None:
    assert date_range_for(question, TODAY) is None
