"""The demo conversation and the `vc demo` command's refusal without a server."""

from __future__ import annotations

import re

import pytest
from django.core.management import CommandError, call_command

from memory_app.demo import TOPICS, demo_messages
from tests.support.server import free_port

HEADER = re.compile(r"^\[(\d{4}/\d\d/\d\d) \((\w{3})\) \d\d:\d\d\] ")


def test_demo_messages_are_deterministic_and_as_many_as_asked():
    assert demo_messages(150) == demo_messages(150)
    assert demo_messages(150) != demo_messages(150, seed=9)
    assert len(demo_messages(7)) == 7
    assert demo_messages(7) == demo_messages(150)[:7]
    assert len(demo_messages(400)) == 400  # past the stories: recaps and questions


def test_demo_messages_cover_every_topic_with_its_facts():
    messages = demo_messages(150)
    for topic in TOPICS:
        assert any(topic.beats[0] in m for m in messages), topic.name
    assert len(TOPICS) >= 6
    assert sum("?" in m for m in messages) >= 20
    assert any("$34,500" in m for m in messages)  # a fact that changes later


def test_demo_sessions_open_with_a_date_header_and_move_forward():
    headers = [HEADER.match(m) for m in demo_messages(150)]
    dates = [h.group(1) for h in headers if h]
    assert len(dates) >= 15
    assert dates == sorted(dates)
    assert headers[0] is not None


def test_demo_questions_come_after_the_facts_they_ask_about():
    messages = demo_messages(300)
    for topic in TOPICS:
        for needs, question in topic.questions:
            if question in messages:
                fact = topic.beats[needs - 1]
                told = next(i for i, m in enumerate(messages) if fact in m)
                assert told < messages.index(question), question


def test_vc_demo_asks_for_a_running_server():
    with pytest.raises(CommandError, match="make run"):
        call_command("vc", "demo", "--url", f"http://127.0.0.1:{free_port()}")
