"""Planned payloads end to end for OpenAI Chat, OpenAI Responses and Gemini.

Each test sends a long history through the proxy with the official SDK, lets
the memory job compact it in the background (``pending_jobs`` reaching 0 in
the API), then sends the next question and inspects the body the fake provider
received: the ``<virtual-context>`` block in the format's system position after
the client's own prompt, the recall block leading the latest user turn, fewer
turns and fewer bytes than the client's history, and tool chains whole (one
chain in the compacted past, one in the kept window). The SDK must still parse
the reply. (Anthropic's counterpart is in ``test_e2e_memory.py``.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from google import genai
from google.genai import types

from memory_app.models import Turn
from tests.fakes.provider import FakeProvider, Recorded, last_user_text
from tests.memory_app.corpus import conversation_texts
from tests.proxy_app.conftest import ProxyKey
from tests.proxy_app.test_e2e_calls import CHAT_TOOLS, RESPONSES_TOOLS, without_marker

pytestmark = [
    pytest.mark.usefixtures("orm"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

CEILING = 2_000
SYSTEM = "You are a patient assistant for one household's projects, trips and training."
FIRST_QUESTION = "What did the contractor quote for cabinets?"
NEXT_QUESTION = "And the plumbing for the sink?"
RECALL_START = "<recalled-context>\nRecalled from earlier"
GEMINI_TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="search",
                description="Search the web.",
                parameters_json_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            )
        ]
    )
]


@dataclass(frozen=True)
class ToolUse:
    """A user asks, the assistant calls ``search``, the tool answers, the assistant sums up."""

    call_id: str
    ask: str
    query: str
    result: str
    answer: str


OLD_CHAIN = ToolUse(
    "call_old_walnut",
    "Look up what walnut veneer costs per square foot.",
    "walnut veneer price",
    "Walnut veneer: $12 per square foot at the lumber yard.",
    "Walnut veneer runs about $12 per square foot.",
)
RECENT_CHAIN = ToolUse(
    "call_recent_jrpass",
    "Check the current JR Pass price for me.",
    "JR Pass 14-day price",
    "14-day JR Pass: 50,000 yen.",
    "The 14-day JR Pass costs 50,000 yen.",
)
Step = tuple[str, str] | ToolUse


def _script() -> list[Step]:
    """The history before the first question: the corpus, one tool chain near its
    start (compacted away later) and one at its end (inside the kept window)."""
    pairs: list[Step] = list(conversation_texts(rounds=3))
    return [*pairs[:2], OLD_CHAIN, *pairs[2:], RECENT_CHAIN]


# ------------------------------------------------------------------ the formats


@dataclass(frozen=True)
class Reply:
    text: str
    headers: dict[str, str]  # lower-case names


@dataclass(frozen=True)
class Dialect:
    """How one format's client writes turns and asks (stream or not)."""

    user: Callable[[str], Any]
    assistant: Callable[[str], Any]
    tool_use: Callable[[ToolUse], list[Any]]
    ask: Callable[[list[Any], bool], Reply]

    def render(self, steps: list[Step]) -> list[Any]:
        items: list[Any] = []
        for step in steps:
            if isinstance(step, ToolUse):
                items += self.tool_use(step)
            else:
                role, text = step
                items.append(self.user(text) if role == "user" else self.assistant(text))
        return items


def _lower(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(headers).items()}


def _chat(gpt: openai.OpenAI) -> Dialect:
    def tool_use(chain: ToolUse) -> list[Any]:
        arguments = json.dumps({"q": chain.query})
        call = {"id": chain.call_id, "type": "function", "function": _function(arguments)}
        return [
            {"role": "user", "content": chain.ask},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": chain.call_id, "content": chain.result},
            {"role": "assistant", "content": chain.answer},
        ]

    def ask(history: list[Any], stream: bool) -> Reply:
        messages: Any = [{"role": "system", "content": SYSTEM}, *history]
        kwargs: Any = {"model": "gpt-4o", "messages": messages, "tools": CHAT_TOOLS}
        if stream:
            chunks = gpt.chat.completions.create(**kwargs, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return Reply(text, _lower(chunks.response.headers))
        raw = gpt.chat.completions.with_raw_response.create(**kwargs)
        return Reply(raw.parse().choices[0].message.content or "", _lower(raw.headers))

    return Dialect(
        user=lambda text: {"role": "user", "content": text},
        assistant=lambda text: {"role": "assistant", "content": text},
        tool_use=tool_use,
        ask=ask,
    )


def _function(arguments: str) -> dict[str, str]:
    return {"name": "search", "arguments": arguments}


def _responses(gpt: openai.OpenAI) -> Dialect:
    def tool_use(chain: ToolUse) -> list[Any]:
        arguments = json.dumps({"q": chain.query})
        return [
            {"role": "user", "content": chain.ask},
            {"type": "function_call", "call_id": chain.call_id, **_function(arguments)},
            {"type": "function_call_output", "call_id": chain.call_id, "output": chain.result},
            {"role": "assistant", "content": chain.answer},
        ]

    def ask(history: list[Any], stream: bool) -> Reply:
        kwargs: Any = {
            "model": "gpt-4o",
            "instructions": SYSTEM,
            "input": history,
            "tools": RESPONSES_TOOLS,
        }
        if stream:
            events = gpt.responses.create(**kwargs, stream=True)
            seen = list(events)
            deltas = [e.delta for e in seen if e.type == "response.output_text.delta"]
            [final] = [e.response for e in seen if e.type == "response.completed"]
            assert "".join(deltas) == final.output_text
            return Reply(final.output_text, _lower(events.response.headers))
        raw = gpt.responses.with_raw_response.create(**kwargs)
        return Reply(raw.parse().output_text, _lower(raw.headers))

    return Dialect(
        user=lambda text: {"role": "user", "content": text},
        assistant=lambda text: {"role": "assistant", "content": text},
        tool_use=tool_use,
        ask=ask,
    )


def _gemini(client: genai.Client) -> Dialect:
    def tool_use(chain: ToolUse) -> list[Any]:
        # Gemini clients send calls without ids: the proxy pairs them by name.
        call = {"name": "search", "args": {"q": chain.query}}
        response = {"name": "search", "response": {"result": chain.result}}
        return [
            {"role": "user", "parts": [{"text": chain.ask}]},
            {"role": "model", "parts": [{"function_call": call}]},
            {"role": "user", "parts": [{"function_response": response}]},
            {"role": "model", "parts": [{"text": chain.answer}]},
        ]

    def ask(history: list[Any], stream: bool) -> Reply:
        config = types.GenerateContentConfig(system_instruction=SYSTEM, tools=GEMINI_TOOLS)
        model = "gemini-2.5-flash"
        if stream:
            chunks = list(
                client.models.generate_content_stream(model=model, contents=history, config=config)
            )
            first = chunks[0].sdk_http_response
            text = "".join(c.text or "" for c in chunks)
        else:
            response = client.models.generate_content(model=model, contents=history, config=config)
            first, text = response.sdk_http_response, response.text or ""
        assert first is not None
        assert first.headers is not None
        return Reply(text, _lower(first.headers))

    return Dialect(
        user=lambda text: {"role": "user", "parts": [{"text": text}]},
        assistant=lambda text: {"role": "model", "parts": [{"text": text}]},
        tool_use=tool_use,
        ask=ask,
    )


# ------------------------------------------------------------------ the conversation


@dataclass(frozen=True)
class Planned:
    """The two upstream requests of a conversation and what the client saw."""

    history: list[Any]  # the client's turns in the second request
    first: Recorded  # forwarded as sent: nothing compacted yet
    second: Recorded  # planned from memory

    @property
    def sent(self) -> dict[str, Any]:
        body: dict[str, Any] = self.second.json
        return body


def _converse(
    dialect: Dialect, proxy_key: ProxyKey, fake: FakeProvider, *, stream: bool
) -> Planned:
    """Send the long history, wait for its compaction, send the next question."""
    proxy_key.account.context_ceiling = CEILING
    proxy_key.account.save()
    history = dialect.render([*_script(), ("user", FIRST_QUESTION)])
    reply = dialect.ask(history, False)
    conversation_id = int(reply.headers["x-vc-conversation"])
    first = fake.requests[-1]
    assert b"<virtual-context>" not in first.body  # nothing compacted yet: sent as it came
    _settled(proxy_key, conversation_id, turns=len(history) + 1)

    history += [dialect.assistant(reply.text), dialect.user(NEXT_QUESTION)]
    reply = dialect.ask(history, stream)
    second = fake.requests[-1]
    assert int(reply.headers["x-vc-conversation"]) == conversation_id
    # The SDK parsed the fake's echo of the upstream's latest user text.
    assert without_marker(reply.text) == _echo(second)
    return Planned(history, first, second)


def _echo(recorded: Recorded) -> str:
    body = recorded.json
    if "contents" in body:
        return "Echo: " + last_user_text(body["contents"], "parts", ["user", None])[:200]
    messages = body.get("messages", body.get("input"))
    return "Echo: " + last_user_text(messages, "content", ["user"])[:200]


def _settled(proxy_key: ProxyKey, conversation_id: int, turns: int) -> dict[str, Any]:
    """The conversation once its ``turns`` are stored and its memory work is done."""
    deadline = time.monotonic() + 60
    while True:
        detail = httpx.get(
            f"{proxy_key.server.url}/api/v1/conversations/{conversation_id}",
            headers={"Authorization": f"Bearer {proxy_key.raw}"},
            timeout=10,
        ).json()
        untagged = Turn.objects.filter(conversation_id=conversation_id, tagged=False).exists()
        if detail["pending_jobs"] == 0 and not untagged and detail["turns"] == turns:
            assert detail["watermark"] > 0, detail
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"background work did not finish: {detail}")
        time.sleep(0.2)


def _assert_filtered(planned: Planned, upstream_turns: list[Any]) -> None:
    assert len(upstream_turns) < len(planned.history)
    assert len(planned.second.body) < len(planned.first.body)


def _assert_recalled(text: str) -> None:
    assert text.startswith(RECALL_START)
    assert "</recalled-context>" in text
    assert "sink" in text.split("</recalled-context>")[0]  # found for this question


# ------------------------------------------------------------------ OpenAI Chat


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_planned_chat_request_has_memory_in_a_system_message_recall_on_the_question_and_whole_tool_chains(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    planned = _converse(_chat(gpt), proxy_key, fake, stream=stream)
    messages = planned.sent["messages"]

    # The client's system message first, then ours with the stable block.
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[1]["role"] == "system"
    assert messages[1]["content"].startswith("<virtual-context>\n")
    assert messages[1]["content"].endswith("</virtual-context>")
    history = messages[2:]
    assert all(m["role"] in ("user", "assistant", "tool") for m in history)
    _assert_filtered(planned, history)

    latest = history[-1]
    assert latest["role"] == "user"
    question, _, recall = latest["content"].partition("\n\n")
    assert question == NEXT_QUESTION
    _assert_recalled(recall)
    _assert_chat_chains(history)
    # The client sent both chains; the old one went whole, the recent one stayed.
    assert _chat_calls(planned.first.json["messages"]) == [OLD_CHAIN.call_id, RECENT_CHAIN.call_id]
    assert _chat_calls(history) == [RECENT_CHAIN.call_id]


def _chat_calls(messages: list[dict[str, Any]]) -> list[str]:
    return [call["id"] for m in messages for call in m.get("tool_calls") or []]


def _assert_chat_chains(messages: list[dict[str, Any]]) -> None:
    """OpenAI's rule: an assistant message with ``tool_calls`` is followed by one
    tool message per call, and a tool message answers a call just before it."""
    expected: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in expected, f"orphan tool result: {message}"
            expected.remove(message["tool_call_id"])
            continue
        assert not expected, f"calls {expected} unanswered before {message}"
        expected = [call["id"] for call in message.get("tool_calls") or []]
    assert not expected, f"calls {expected} unanswered at the end"


# ------------------------------------------------------------------ OpenAI Responses


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_planned_responses_request_has_memory_in_instructions_recall_on_the_question_and_whole_tool_chains(
    gpt: openai.OpenAI, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    planned = _converse(_responses(gpt), proxy_key, fake, stream=stream)
    sent = planned.sent

    instructions, _, block = sent["instructions"].partition("\n\n")
    assert instructions == SYSTEM
    assert block.startswith("<virtual-context>\n")
    assert block.endswith("</virtual-context>")
    items = sent["input"]
    assert "<virtual-context>" not in json.dumps(items)
    _assert_filtered(planned, items)

    latest = items[-1]
    assert latest["role"] == "user"
    question, _, recall = latest["content"].partition("\n\n")
    assert question == NEXT_QUESTION
    _assert_recalled(recall)
    _assert_responses_chains(items)
    assert _responses_calls(planned.first.json["input"]) == [
        OLD_CHAIN.call_id,
        RECENT_CHAIN.call_id,
    ]
    assert _responses_calls(items) == [RECENT_CHAIN.call_id]


def _responses_calls(items: list[dict[str, Any]]) -> list[str]:
    return [item["call_id"] for item in items if item.get("type") == "function_call"]


def _assert_responses_chains(items: list[dict[str, Any]]) -> None:
    """Every ``function_call_output`` answers an earlier ``function_call`` of its
    ``call_id``, and every call is answered (OpenAI rejects either orphan)."""
    open_calls: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            open_calls.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in open_calls, f"orphan output: {item}"
            open_calls.remove(item["call_id"])
    assert not open_calls, f"calls {open_calls} never answered"


# ------------------------------------------------------------------ Gemini


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_planned_gemini_request_has_memory_in_the_system_instruction_recall_on_the_question_and_whole_tool_chains(
    gemini: genai.Client, fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    planned = _converse(_gemini(gemini), proxy_key, fake, stream=stream)
    sent = planned.sent

    system = sent["systemInstruction"]["parts"]
    assert system[0] == {"text": SYSTEM}
    assert system[-1]["text"].startswith("\n\n<virtual-context>\n")
    assert system[-1]["text"].endswith("</virtual-context>")
    contents = sent["contents"]
    assert "<virtual-context>" not in json.dumps(contents)
    _assert_filtered(planned, contents)

    latest = contents[-1]
    assert latest["role"] == "user"
    [question, recall] = latest["parts"]
    assert question == {"text": NEXT_QUESTION}
    _assert_recalled(recall["text"])
    _assert_gemini_turns(contents)
    first = planned.first.json["contents"]
    assert _gemini_queries(first) == [OLD_CHAIN.query, RECENT_CHAIN.query]
    # Both calls are "search" without an id: the old chain went whole, the recent
    # one stayed (the proxy must not pair the recent response with the old call).
    assert _gemini_queries(contents) == [RECENT_CHAIN.query]


def _gemini_queries(contents: list[dict[str, Any]]) -> list[str]:
    parts = [p for c in contents for p in c["parts"]]
    return [p["functionCall"]["args"]["q"] for p in parts if "functionCall" in p]


def _assert_gemini_turns(contents: list[dict[str, Any]]) -> None:
    """What the adapter and Gemini keep true: model turns do not repeat (the
    adapter joins consecutive ones), a model turn with calls follows a user turn
    and is answered by the very next content, which holds only the responses,
    and no response comes without its call."""
    roles = [c["role"] for c in contents]
    assert set(roles) <= {"user", "model"}
    assert all(c["parts"] for c in contents)
    for before, after in zip(roles, roles[1:], strict=False):
        assert (before, after) != ("model", "model")
    for n, content in enumerate(contents):
        parts = content["parts"]
        responses = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
        calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        if responses:
            assert len(responses) == len(parts), "a response content holds only responses"
            previous = contents[n - 1] if n else {"parts": []}
            asked = [p["functionCall"]["name"] for p in previous["parts"] if "functionCall" in p]
            assert asked == responses, f"orphan function response at {n}"
        if calls:
            # Gemini's rule: a function call turn comes right after a user turn
            # (a question or function responses), never first or after the model.
            assert n > 0, "the window starts with a function call"
            assert contents[n - 1]["role"] == "user"
            following = contents[n + 1]["parts"] if n + 1 < len(contents) else []
            answered = [p["functionResponse"]["name"] for p in following if "functionResponse" in p]
            assert answered == calls, f"function call at {n} unanswered"
