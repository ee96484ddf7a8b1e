"""The simulated provider answers the official anthropic SDK like the real API."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from proxy_app.simulator import MODEL, Simulator, reply_text

KITCHEN = "Our contractor is Marco Bellini, and the kitchen budget is $28,000."


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    running = Simulator().start()
    yield running
    running.stop()


@pytest.fixture
def client(simulator: Simulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="any-key", base_url=simulator.url, max_retries=0)


def _chat(*texts: str) -> list[dict[str, object]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]


def test_simulator_answers_a_message_with_usage(client, simulator):
    message = client.messages.create(
        model=MODEL, max_tokens=100, messages=_chat(f"[2026/09/01 (Tue) 08:30] {KITCHEN}")
    )
    text = message.content[0].text
    assert "$28,000" in text
    assert "[2026/09/01" not in text
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 10
    assert message.usage.output_tokens == len(text.split())
    assert simulator.served == 1


def test_simulator_streams_the_same_reply(client):
    chat = _chat(KITCHEN, "Okay.", "What is the kitchen budget?")
    plain = client.messages.create(model=MODEL, max_tokens=100, messages=chat)
    with client.messages.stream(model=MODEL, max_tokens=100, messages=chat) as stream:
        deltas = list(stream.text_stream)
        streamed = stream.get_final_message()
    assert len(deltas) > 3
    assert "".join(deltas) == streamed.content[0].text == plain.content[0].text
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    assert streamed.usage.input_tokens == plain.usage.input_tokens


def test_simulator_counts_tokens_and_lists_its_model(client):
    count = client.messages.count_tokens(model=MODEL, messages=_chat(KITCHEN * 10))
    assert count.input_tokens > len(KITCHEN * 10) // 4 - 5
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_simulator_answers_unknown_paths_with_the_error_shape(simulator):
    response = httpx.post(f"{simulator.url}/v1/complete", json={})
    assert response.status_code == 404
    assert response.json()["type"] == "error"


def test_simulator_reads_a_marked_prefix_from_its_cache(client):
    long_system = [
        {"type": "text", "text": "rules " * 6000, "cache_control": {"type": "ephemeral"}}
    ]
    first = client.messages.create(
        model=MODEL, max_tokens=50, system=long_system, messages=_chat("Hello there, friend.")
    )
    second = client.messages.create(
        model=MODEL, max_tokens=50, system=long_system, messages=_chat("Another question here?")
    )
    assert first.usage.cache_creation_input_tokens > 4096
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0


def test_simulator_does_not_cache_short_or_unmarked_prompts(client):
    system = [{"type": "text", "text": "short rules", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        message = client.messages.create(
            model=MODEL, max_tokens=50, system=system, messages=_chat("Hello there, friend.")
        )
    assert message.usage.cache_read_input_tokens == message.usage.cache_creation_input_tokens == 0


def test_reply_answers_a_question_from_the_prompt_latest_fact_first():
    messages = _chat(
        KITCHEN,
        "Okay.",
        "Bad news: the walnut went up, so the new kitchen budget is $34,500.",
        "Okay.",
        "What is the kitchen budget now?",
    )
    assert "$34,500" in reply_text(messages)


def test_reply_takes_a_recall_block_as_context_not_as_the_question():
    recall = "<recalled-context>\n[2026/09/01] user: Our contractor is Marco Bellini.\n</recalled-context>"
    question = {
        "role": "user",
        "content": [
            {"type": "text", "text": recall},
            {"type": "text", "text": "Who is our contractor?"},
        ],
    }
    assert "Marco Bellini" in reply_text([question])
    unknown = reply_text(_chat("Who is our plumber?"))
    assert unknown == "I don't see that here. What was it again?"
