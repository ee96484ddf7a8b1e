"""Conversation identity and faithfulness through the real proxy, driven by the SDKs.

Which conversation a request lands in (the session marker planted in replies,
the ``X-VC-Session`` header, the fingerprint of the opening), that accounts
never share one, what is stored when a client resends, edits or truncates its
history, and that the provider receives what the client sent: markers
stripped, every field the proxy does not understand untouched.

Every format is driven the way its SDK is normally used: ``ask`` sends one
request and returns what the client ends up holding (the reply text, the
streamed deltas, the assistant item(s) it would resend) plus the proxy's
response headers.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from django.contrib.auth import get_user_model
from google import genai
from google.genai import types

from memory_app.models import Conversation, Turn
from proxy_app.formats import HISTORY_FIELD
from telemetry_app.models import RequestLog
from tests.fakes.provider import FakeProvider
from tests.proxy_app.conftest import (
    ANTHROPIC_SECRET,
    GEMINI_SECRET,
    OPENAI_SECRET,
    ProxyKey,
)
from tests.proxy_app.test_e2e_calls import RESPONSES_TOOLS, requests_of, without_marker
from tests.support.server import Server
from vcloud.accounts.services import account_for_user, vckey_create

pytestmark = [
    pytest.mark.usefixtures("orm"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

FORMATS = ("anthropic", "openai_chat", "openai_responses", "gemini")
EVERY_WAY = [(fmt, stream) for fmt in FORMATS for stream in (False, True)]
MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai_chat": "gpt-4o",
    "openai_responses": "gpt-4o",
    "gemini": "gemini-2.5-flash",
}
MARKER = re.compile(r"\n\n<!-- vc:([A-Za-z0-9._:\-]+) -->$")
MARKER_ANYWHERE = re.compile(r"\n\n<!-- vc:[A-Za-z0-9._:\-]+ -->")


# -------------------------------------------------------------------------- drivers


@dataclass
class Answer:
    """What the client holds after one request."""

    text: str  # the reply text as the SDK assembled it
    deltas: list[str]  # the streamed text deltas, in order ([] when not streamed)
    items: list[Any]  # the assistant item(s), as the client resends them
    conversation: int  # X-VC-Conversation
    overhead_ms: float  # X-VC-Overhead-Ms

    @property
    def token(self) -> str:
        match = MARKER.search(self.text)
        assert match, f"no session marker at the end of {self.text!r}"
        return match.group(1)


def user(fmt: str, text: str) -> dict[str, Any]:
    if fmt == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": "user", "content": text}


def assistant(fmt: str, text: str) -> dict[str, Any]:
    """An assistant turn as a client that keeps only the reply text resends it."""
    if fmt == "gemini":
        return {"role": "model", "parts": [{"text": text}]}
    return {"role": "assistant", "content": text}


def ask(
    fmt: str,
    key: ProxyKey,
    history: list[Any],
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> Answer:
    return _ASK[fmt](key, list(history), stream, headers or {}, params)


_clients: dict[tuple[str, str], Any] = {}


def sdk(kind: str, key: ProxyKey) -> Any:
    """The SDK client of ``kind`` ("anthropic" or "openai") with ``key``'s base URL.

    Building a client costs tens of milliseconds (an SSL context, even for http);
    ``with_options`` reuses the first one's connection pool.
    """
    base = _clients.get((kind, ""))
    if base is None:
        if kind == "anthropic":
            base = anthropic.Anthropic(api_key=ANTHROPIC_SECRET, base_url=key.base, max_retries=0)
        else:
            base = openai.OpenAI(api_key=OPENAI_SECRET, base_url=key.base + "/v1", max_retries=0)
        _clients[(kind, "")] = base
    url = key.base if kind == "anthropic" else key.base + "/v1"
    client = _clients.get((kind, url))
    if client is None:
        client = _clients[(kind, url)] = base.with_options(base_url=url)
    return client


def gemini_client() -> genai.Client:
    """One google-genai client; each request names its key's base URL in its config."""
    client = _clients.get(("gemini", ""))
    if client is None:
        client = _clients[("gemini", "")] = genai.Client(api_key=GEMINI_SECRET)
    return client


def gemini_options(key: ProxyKey, headers: dict[str, str] | None = None) -> types.HttpOptions:
    return types.HttpOptions(base_url=key.base, headers=headers or {})


def _answer(text: str, deltas: list[str], items: list[Any], headers: Any) -> Answer:
    found = {k.lower(): v for k, v in dict(headers).items()}
    return Answer(
        text,
        deltas,
        items,
        conversation=int(found["x-vc-conversation"]),
        overhead_ms=float(found["x-vc-overhead-ms"]),
    )


def _ask_anthropic(
    key: ProxyKey, history: list[Any], stream: bool, headers: dict[str, str], params: Any
) -> Answer:
    client = sdk("anthropic", key)
    kwargs = {"model": MODELS["anthropic"], "max_tokens": 64, "messages": history, **params}
    if stream:
        with client.messages.stream(**kwargs, extra_headers=headers) as events:
            deltas = list(events.text_stream)
            message = events.get_final_message()
            response_headers = events.response.headers
    else:
        raw = client.messages.with_raw_response.create(**kwargs, extra_headers=headers)
        message, deltas, response_headers = raw.parse(), [], raw.headers
    text = "".join(block.text for block in message.content if block.type == "text")
    item = {"role": "assistant", "content": message.content}
    return _answer(text, deltas, [item], response_headers)


def _ask_chat(
    key: ProxyKey, history: list[Any], stream: bool, headers: dict[str, str], params: Any
) -> Answer:
    client = sdk("openai", key)
    kwargs = {"model": MODELS["openai_chat"], "messages": history, **params}
    if stream:
        chunks = client.chat.completions.create(**kwargs, stream=True, extra_headers=headers)
        deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        deltas = [d for d in deltas if d]
        text, response_headers = "".join(deltas), chunks.response.headers
    else:
        raw = client.chat.completions.with_raw_response.create(**kwargs, extra_headers=headers)
        text, deltas = raw.parse().choices[0].message.content or "", []
        response_headers = raw.headers
    return _answer(text, deltas, [{"role": "assistant", "content": text}], response_headers)


def _ask_responses(
    key: ProxyKey, history: list[Any], stream: bool, headers: dict[str, str], params: Any
) -> Answer:
    client = sdk("openai", key)
    kwargs = {"model": MODELS["openai_responses"], "input": history, **params}
    raw: Any = client.responses.with_raw_response.create(
        **kwargs, stream=stream, extra_headers=headers
    )
    if stream:
        events = list(raw.parse())
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        [final] = [e.response for e in events if e.type == "response.completed"]
    else:
        final, deltas = raw.parse(), []
    items = [item.model_dump(exclude_none=True) for item in final.output]
    return _answer(final.output_text, deltas, items, raw.headers)


def _ask_gemini(
    key: ProxyKey, history: list[Any], stream: bool, headers: dict[str, str], params: Any
) -> Answer:
    client = gemini_client()
    config = types.GenerateContentConfig(http_options=gemini_options(key, headers), **params)
    model = MODELS["gemini"]
    if stream:
        chunks = list(
            client.models.generate_content_stream(model=model, contents=history, config=config)
        )
        deltas = [c.text for c in chunks if c.text]
        text = "".join(deltas)
        # A client that shows the stream keeps the joined text as the model turn.
        items: list[Any] = [assistant("gemini", text)]
        first = chunks[0].sdk_http_response
    else:
        response = client.models.generate_content(model=model, contents=history, config=config)
        assert response.candidates
        text, deltas = response.text or "", []
        items = [response.candidates[0].content]
        first = response.sdk_http_response
    assert first is not None
    return _answer(text, deltas, items, first.headers)


_ASK: dict[str, Callable[..., Answer]] = {
    "anthropic": _ask_anthropic,
    "openai_chat": _ask_chat,
    "openai_responses": _ask_responses,
    "gemini": _ask_gemini,
}


# -------------------------------------------------------------------------- helpers


def plain(value: Any) -> Any:
    """``value`` as JSON data (SDK models dumped as the SDK sends them)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def scrub(value: Any) -> Any:
    """``value`` as the proxy forwards it: the session markers it planted cut out,
    and a block, part or item that held nothing but a marker left out."""
    value = plain(value)
    if isinstance(value, str):
        return MARKER_ANYWHERE.sub("", value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value if not _marker_only(v)]
    return value


def _marker_only(value: Any) -> bool:
    value = plain(value)
    if not isinstance(value, dict) or "<!-- vc:" not in json.dumps(value):
        return False
    after = scrub(value)
    return after.get("text") == "" or after.get("parts") == [] or after.get("content") == []


def sent(fake: FakeProvider, fmt: str, index: int = -1) -> list[Any]:
    """The history the provider received in request ``index``."""
    history: list[Any] = fake.requests[index].json[HISTORY_FIELD[fmt]]
    return history


def assert_no_marker_reached(fake: FakeProvider) -> None:
    assert fake.requests
    for recorded in fake.requests:
        assert b"<!-- vc:" not in recorded.body, recorded.json


def assert_unmarked(answer: Answer) -> None:
    assert "<!-- vc:" not in answer.text
    assert not any("<!-- vc:" in delta for delta in answer.deltas)


def assert_marked(answer: Answer, reply: str, *, stream: bool) -> None:
    """The reply ends with the marker; a stream sends it as its final text delta."""
    assert without_marker(answer.text) == reply
    assert answer.token
    if stream:
        assert MARKER.fullmatch(answer.deltas[-1]), answer.deltas
        assert "".join(answer.deltas[:-1]) == reply


def active(conversation_id: int, fmt: str) -> list[tuple[int, str, str]]:
    """(position, role, text) of the conversation's active turns.

    The fake answers Gemini in one text part per word, which the stored text
    joins by newlines: they are dropped for comparison.
    """
    rows = (
        Turn.objects.filter(conversation_id=conversation_id, replaced=False)
        .order_by("position")
        .values_list("position", "role", "text")
    )
    return [(p, r, t.replace("\n", "") if fmt == "gemini" else t) for p, r, t in rows]


def rows_of(conversation_id: int) -> int:
    return Turn.objects.filter(conversation_id=conversation_id).count()


def replaced_of(conversation_id: int) -> int:
    """Stored turns the client later changed (kept, marked replaced)."""
    return Turn.objects.filter(conversation_id=conversation_id, replaced=True).count()


def exchange(*texts: str) -> list[tuple[int, str, str]]:
    """Expected active turns: each user text answered by the fake's echo."""
    out: list[tuple[int, str, str]] = []
    for text in texts:
        out.append((len(out), "user", text))
        out.append((len(out), "assistant", f"Echo: {text}"))
    return out


_accounts = iter(range(1_000_000))


def new_key(server: Server) -> ProxyKey:
    """Another account with its own vckey (removed with the e2e users at the end)."""
    name = f"e2e-other-{time.time_ns()}-{next(_accounts)}"
    account = account_for_user(get_user_model().objects.create_user(name))
    _, raw = vckey_create(account=account, name="e2e")
    return ProxyKey(account, raw, server)


# ------------------------------------------- 1. the reply's session marker, 7. headers


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_resent_reply_marker_is_stripped_and_routes_into_the_same_conversation(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    history = [user(fmt, "first question")]
    first = ask(fmt, proxy_key, history, stream=stream)
    assert_marked(first, "Echo: first question", stream=stream)

    history += [*first.items, user(fmt, "second question")]
    second = ask(fmt, proxy_key, history, stream=stream)

    assert_marked(second, "Echo: second question", stream=stream)
    assert second.token == first.token
    assert_no_marker_reached(fake)
    assert sent(fake, fmt) == scrub(history)  # only the marker was taken out
    assert second.conversation == first.conversation
    logs = requests_of(proxy_key, 2)
    assert [log.conversation_id for log in logs] == [first.conversation] * 2
    assert [log.overhead_ms for log in logs] == [first.overhead_ms, second.overhead_ms]
    assert min(first.overhead_ms, second.overhead_ms) >= 0
    assert Conversation.objects.get(pk=first.conversation).account_id == proxy_key.account.pk
    assert active(first.conversation, fmt) == exchange("first question", "second question")
    assert rows_of(first.conversation) == 4  # nothing stored twice, nothing replaced


# ------------------------------------------------------------- 2. X-VC-Session header


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_session_header_routes_into_one_conversation_of_the_account_with_unmarked_replies(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    alpha = {"X-VC-Session": "session-alpha"}
    history = [user(fmt, "first question")]
    first = ask(fmt, proxy_key, history, stream=stream, headers=alpha)
    history += [*first.items, user(fmt, "second question")]
    second = ask(fmt, proxy_key, history, stream=stream, headers=alpha)
    beta = {"X-VC-Session": "session-beta"}
    other = ask(fmt, proxy_key, [user(fmt, "first question")], stream=stream, headers=beta)
    someone = new_key(proxy_key.server)  # another account, the same session id
    theirs = ask(fmt, someone, history, stream=stream, headers=alpha)

    for answer in (first, second, other, theirs):
        assert_unmarked(answer)
    assert (first.text, second.text) == ("Echo: first question", "Echo: second question")
    assert second.conversation == first.conversation
    assert other.conversation != first.conversation
    assert theirs.conversation not in (first.conversation, other.conversation)
    assert_no_marker_reached(fake)
    requests_of(someone)
    requests_of(proxy_key, 3)
    assert active(first.conversation, fmt) == exchange("first question", "second question")
    assert rows_of(first.conversation) == 4
    assert active(other.conversation, fmt) == exchange("first question")
    assert active(theirs.conversation, fmt) == exchange("first question", "second question")
    sessions = Conversation.objects.filter(account=proxy_key.account).values_list(
        "pk", "session_id"
    )
    assert sorted(sessions) == [
        (first.conversation, "session-alpha"),
        (other.conversation, "session-beta"),
    ]
    assert Conversation.objects.get(pk=theirs.conversation).account_id == someone.account.pk


# ---------------------------------------------------- 3. markers do not cross accounts


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_a_marker_copied_from_another_accounts_reply_never_routes_into_its_conversation(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    history = [user(fmt, "shared opening")]
    victim = ask(fmt, proxy_key, history, stream=stream)
    attacker_key = new_key(proxy_key.server)

    history += [*victim.items, user(fmt, "what did they say?")]
    attacker = ask(fmt, attacker_key, history, stream=stream)

    assert attacker.conversation != victim.conversation
    assert attacker.token != victim.token
    assert_no_marker_reached(fake)  # a foreign marker is stripped all the same
    requests_of(attacker_key)
    requests_of(proxy_key)
    conversation = Conversation.objects.get(pk=attacker.conversation)
    assert conversation.account_id == attacker_key.account.pk
    assert active(attacker.conversation, fmt) == exchange("shared opening", "what did they say?")
    assert active(victim.conversation, fmt) == exchange("shared opening")
    assert rows_of(victim.conversation) == 2
    assert Conversation.objects.get(pk=victim.conversation).turn_count == 2


# ----------------------------------------------- 4. fingerprint of the opening, no marker


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_history_resent_without_the_marker_is_routed_by_the_fingerprint_of_its_opening(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    opening = [user(fmt, "fingerprinted opening")]
    first = ask(fmt, proxy_key, opening, stream=stream)
    # The client stripped the marker (or rendered it away) before keeping the reply.
    kept = scrub(first.items) if fmt == "gemini" else [assistant(fmt, without_marker(first.text))]
    history = [*opening, *kept, user(fmt, "follow-up")]
    second = ask(fmt, proxy_key, history, stream=stream)
    fresh = ask(fmt, proxy_key, opening, stream=stream)  # a new chat with the same opening
    other = ask(fmt, proxy_key, [user(fmt, "another opening"), *kept, user(fmt, "follow-up")])

    assert second.conversation == first.conversation
    assert fresh.conversation != first.conversation
    assert other.conversation not in (first.conversation, fresh.conversation)
    assert sent(fake, fmt, 1) == plain(history)
    requests_of(proxy_key, 4)
    assert active(first.conversation, fmt) == exchange("fingerprinted opening", "follow-up")
    assert rows_of(first.conversation) == 4


# ---------------------------------------------------------- 5. edits and truncation


def _two_exchanges(fmt: str, key: ProxyKey, name: str) -> tuple[list[Any], Answer]:
    """[u0, a1, u2, a3] of a new conversation, as the client holds it."""
    history = [user(fmt, f"{name}: first")]
    first = ask(fmt, key, history)
    history += [*first.items, user(fmt, f"{name}: second")]
    second = ask(fmt, key, history)
    return [*history, *second.items], first


@pytest.mark.parametrize("fmt", FORMATS)
def test_edited_or_truncated_history_is_stored_as_sent_without_duplicates(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str
) -> None:
    cases: list[tuple[str, list[Any], list[tuple[int, str, str]], int]] = []
    # (name, third request, expected active turns, stored rows it replaces)
    h, _ = _two_exchanges(fmt, proxy_key, "edit")
    edited = [user(fmt, "edit: first, edited"), *h[1:3]]
    expected = exchange("edit: first, edited", "edit: second")
    expected[1] = (1, "assistant", "Echo: edit: first")
    cases.append(("edit", edited, expected, 4))
    h, _ = _two_exchanges(fmt, proxy_key, "drop")
    cases.append(
        ("drop", [*h[:2], user(fmt, "drop: instead")], exchange("drop: first", "drop: instead"), 2)
    )
    h, _ = _two_exchanges(fmt, proxy_key, "regenerate")
    cases.append(("regenerate", h[:3], exchange("regenerate: first", "regenerate: second"), 1))
    h, _ = _two_exchanges(fmt, proxy_key, "window")  # the client drops its oldest exchange
    window = exchange("window: first", "window: second", "window: third")
    cases.append(("window", [*h[2:], user(fmt, "window: third")], window, 0))

    conversations = []
    for name, request, _, _ in cases:
        third = ask(fmt, proxy_key, request)
        assert sent(fake, fmt) == scrub(request), name
        conversations.append(third.conversation)

    assert_no_marker_reached(fake)
    assert len(set(conversations)) == len(cases)
    requests_of(proxy_key, 3 * len(cases))
    for (name, _, expected, replaced), conversation in zip(cases, conversations, strict=True):
        logs = RequestLog.objects.filter(conversation_id=conversation)
        assert logs.count() == 3, name  # all three requests landed in one conversation
        assert active(conversation, fmt) == expected, name
        assert replaced_of(conversation) == replaced, name
        assert rows_of(conversation) == len(expected) + replaced, name
        assert Conversation.objects.get(pk=conversation).turn_count == len(expected), name


# --------------------------------------------- 6. fields the proxy does not understand


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_cache_control_thinking_and_unknown_fields_reach_the_provider_unchanged(
    fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    system = [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    extra = {"vendor_knob": {"level": 3, "tags": ["a", "b"]}}
    cached = {"type": "ephemeral", "ttl": "1h"}
    opening = {
        "role": "user",
        "content": [{"type": "text", "text": "first question", "cache_control": cached}],
    }
    params = {"system": system, "thinking": thinking, "extra_body": extra}
    first = ask("anthropic", proxy_key, [opening], stream=stream, **params)
    thought = {"type": "thinking", "thinking": "The user asks.", "signature": "EqQBCkYIARgCSig=="}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    reply = {"type": "text", "text": first.text, "cache_control": {"type": "ephemeral"}}
    follow = {
        "role": "user",
        "content": [{"type": "text", "text": "second question", "cache_control": cached}],
    }
    history = [opening, {"role": "assistant", "content": [thought, redacted, reply]}, follow]

    second = ask("anthropic", proxy_key, history, stream=stream, **params)

    assert second.conversation == first.conversation
    for recorded in fake.requests:
        assert recorded.json["system"] == system
        assert recorded.json["thinking"] == thinking
        assert recorded.json["vendor_knob"] == extra["vendor_knob"]
    stripped = {**reply, "text": "Echo: first question"}
    assert fake.requests[0].json["messages"] == [opening]
    assert fake.requests[1].json["messages"] == [
        opening,
        {"role": "assistant", "content": [thought, redacted, stripped]},
        follow,
    ]
    requests_of(proxy_key, 2)
    stored = Turn.objects.get(conversation_id=first.conversation, position=1, replaced=False)
    assert stored.content == {"role": "assistant", "content": [thought, redacted, stripped]}


@pytest.mark.parametrize("stream", [False, True])
def test_chat_reasoning_effort_and_unknown_fields_reach_the_provider_unchanged(
    fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    extra = {"vendor_knob": {"level": 3}, "top_k": 5, "reasoning": {"exclude": True}}
    opening = {
        "role": "user",
        "content": [
            {"type": "text", "text": "first question", "cache_control": {"type": "ephemeral"}}
        ],
    }
    system = {"role": "developer", "content": "Be terse.", "name": "house-rules"}
    params = {"reasoning_effort": "low", "extra_body": extra, "user": "end-user-7"}
    first = ask("openai_chat", proxy_key, [system, opening], stream=stream, **params)
    reply = {
        "role": "assistant",
        "content": first.text,
        "reasoning_content": "The user asks.",
        "name": "bot",
    }
    history = [system, opening, reply, {"role": "user", "content": "second question"}]

    second = ask("openai_chat", proxy_key, history, stream=stream, **params)

    assert second.conversation == first.conversation
    for recorded in fake.requests:
        assert recorded.json["reasoning_effort"] == "low"
        assert recorded.json["user"] == "end-user-7"
        for name, value in extra.items():
            assert recorded.json[name] == value
    assert fake.requests[1].json["messages"] == [
        system,
        opening,
        {**reply, "content": "Echo: first question"},
        history[-1],
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_reasoning_and_unknown_fields_reach_the_provider_unchanged(
    fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    reasoning = {"effort": "low", "summary": "auto"}
    params = {
        "reasoning": reasoning,
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "extra_body": {"vendor_knob": {"level": 3}},
    }
    opening = {"role": "user", "content": [{"type": "input_text", "text": "first question"}]}
    first = ask("openai_responses", proxy_key, [opening], stream=stream, **params)
    thought = {
        "type": "reasoning",
        "id": "rs_fake1",
        "summary": [{"type": "summary_text", "text": "The user asks."}],
        "encrypted_content": "gAAAAABo-opaque",
    }
    history = [opening, thought, *first.items, {"role": "user", "content": "second question"}]

    second = ask("openai_responses", proxy_key, history, stream=stream, **params)

    assert second.conversation == first.conversation
    for recorded in fake.requests:
        assert recorded.json["reasoning"] == reasoning
        assert recorded.json["include"] == ["reasoning.encrypted_content"]
        assert recorded.json["store"] is False
        assert recorded.json["vendor_knob"] == {"level": 3}
    assert fake.requests[1].json["input"] == scrub(history)
    assert fake.requests[1].json["input"][2]["content"][0]["text"] == "Echo: first question"


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_safety_settings_thoughts_and_signatures_reach_the_provider_unchanged(
    fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    safety = [
        types.SafetySetting(
            category=types.HarmCategory.HARM_CATEGORY_HATE_SPEECH,
            threshold=types.HarmBlockThreshold.BLOCK_NONE,
        )
    ]
    params = {
        "safety_settings": safety,
        "temperature": 0.25,
        "thinking_config": types.ThinkingConfig(include_thoughts=True, thinking_budget=512),
        "system_instruction": "Be terse.",
    }
    opening = user("gemini", "first question")
    first = ask("gemini", proxy_key, [opening], stream=stream, **params)
    model = {
        "role": "model",
        "parts": [
            {"text": "The user asks.", "thought": True},
            {"text": first.text, "thoughtSignature": "c2lnbmF0dXJl"},
        ],
    }
    history = [opening, model, user("gemini", "second question")]

    second = ask("gemini", proxy_key, history, stream=stream, **params)

    assert second.conversation == first.conversation
    expected_safety = [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}]
    for recorded in fake.requests:
        assert recorded.json["safetySettings"] == expected_safety
        assert recorded.json["generationConfig"] == fake.requests[0].json["generationConfig"]
        assert recorded.json["systemInstruction"] == fake.requests[0].json["systemInstruction"]
    config = fake.requests[0].json["generationConfig"]
    assert config["temperature"] == 0.25
    assert "thinkingConfig" in config
    assert sent(fake, "gemini") == scrub(history)
    assert sent(fake, "gemini")[1]["parts"][1] == {
        "text": "Echo: first question",
        "thoughtSignature": "c2lnbmF0dXJl",
    }


# ------------------------------------------------------------- 8. X-VC-Passthrough


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_passthrough_replies_carry_no_marker_and_the_body_goes_upstream_as_sent(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    first = ask(fmt, proxy_key, [user(fmt, "first question")], stream=stream)
    history = [user(fmt, "first question"), *first.items, user(fmt, "second question")]
    passthrough = {"X-VC-Passthrough": "1"}

    second = ask(fmt, proxy_key, history, stream=stream, headers=passthrough)

    assert_unmarked(second)
    assert second.text == "Echo: second question"
    assert second.conversation == first.conversation  # still recorded in its conversation
    assert sent(fake, fmt) == plain(history)  # the old marker too: nothing is changed
    assert b"<!-- vc:" in fake.requests[-1].body
    first_log, second_log = requests_of(proxy_key, 2)
    assert (first_log.passthrough, second_log.passthrough) == (False, True)
    assert active(first.conversation, fmt) == exchange("first question", "second question")


# ----------------------------------- markers a client altered, and faithful stripping


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_marker_whose_blank_line_the_client_altered_still_routes_and_is_stripped(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str
) -> None:
    # Only the marker's own blank line goes: a line break the client added stays.
    for prefix, kept in [("", ""), ("\r\n", ""), ("\r\n\r\n", ""), ("\n\n\n", "\n")]:
        question = f"question {prefix!r}"
        first = ask(fmt, proxy_key, [user(fmt, question)])
        altered = first.text.replace("\n\n<!-- vc:", prefix + "<!-- vc:")
        history = [user(fmt, question), assistant(fmt, altered), user(fmt, "next")]

        second = ask(fmt, proxy_key, history)

        assert second.conversation == first.conversation, repr(prefix)
        reply = assistant(fmt, f"Echo: {question}{kept}")
        assert sent(fake, fmt) == [history[0], reply, history[2]], repr(prefix)
    assert_no_marker_reached(fake)


@pytest.mark.parametrize(("fmt", "stream"), EVERY_WAY)
def test_a_reply_ending_in_a_newline_is_resent_upstream_exactly_as_the_model_wrote_it(
    fake: FakeProvider, proxy_key: ProxyKey, fmt: str, stream: bool
) -> None:
    fake.reply_text = "A reply ending in a newline.\n"
    first = ask(fmt, proxy_key, [user(fmt, "first question")], stream=stream)
    assert without_marker(first.text) == "A reply ending in a newline.\n"
    history = [user(fmt, "first question"), *first.items, user(fmt, "second question")]

    second = ask(fmt, proxy_key, history, stream=stream)

    assert second.conversation == first.conversation
    assert sent(fake, fmt) == scrub(history)  # the model's own newline is kept


# ---------------------------------------------------- SDK helpers that keep the history


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_chat_helper_history_is_stored_once_per_turn(
    fake: FakeProvider, proxy_key: ProxyKey, stream: bool
) -> None:
    config = types.GenerateContentConfig(http_options=gemini_options(proxy_key))
    chat = gemini_client().chats.create(model=MODELS["gemini"], config=config)
    questions = ["first question", "second question", "third question"]
    for question in questions[:-1]:
        if stream:
            text = "".join(c.text or "" for c in chat.send_message_stream(question))
        else:
            text = chat.send_message(question).text or ""
        assert without_marker(text) == f"Echo: {question}"
    # google-genai keeps one model content per streamed chunk (the marker's too).
    before = [c.model_dump(mode="json", exclude_none=True) for c in chat.get_history()]
    if stream:
        last = "".join(c.text or "" for c in chat.send_message_stream(questions[-1]))
    else:
        last = chat.send_message(questions[-1]).text or ""
    assert without_marker(last) == "Echo: third question"

    assert_no_marker_reached(fake)
    # Upstream gets the chat's own contents, only the marker-only ones left out.
    assert sent(fake, "gemini") == [*scrub(before), user("gemini", "third question")]
    logs = requests_of(proxy_key, 3)
    [conversation] = {log.conversation_id for log in logs}
    assert conversation is not None
    assert active(conversation, "gemini") == exchange(*questions)
    assert rows_of(conversation) == 6


def test_responses_stream_accumulator_ends_with_the_marker_and_its_output_routes_the_next_turn(
    fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    gpt = sdk("openai", proxy_key)
    history: list[Any] = [{"role": "user", "content": "first question"}]
    with gpt.responses.stream(model="gpt-4o", input=history) as stream:
        events = list(stream)
        final = stream.get_final_response()

    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text
    assert MARKER.fullmatch(deltas[-1])
    assert without_marker(final.output_text) == "Echo: first question"
    assert [e.text for e in events if e.type == "response.output_text.done"] == [final.output_text]
    [item] = final.output
    assert item.type == "message"
    history += [item.model_dump(exclude_none=True), {"role": "user", "content": "second"}]
    second = gpt.responses.create(model="gpt-4o", input=history)

    assert without_marker(second.output_text) == "Echo: second"
    assert_no_marker_reached(fake)
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    conversation = first_log.conversation_id
    assert active(conversation, "openai_responses") == exchange("first question", "second")
    assert rows_of(conversation) == 4


def test_responses_streamed_tool_call_gets_the_marker_as_a_message_of_its_own(
    fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    gpt = sdk("openai", proxy_key)
    history: list[Any] = [{"role": "user", "content": "use tool please"}]
    with gpt.responses.stream(model="gpt-4o", tools=RESPONSES_TOOLS, input=history) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert [item.type for item in final.output] == ["function_call", "message"]
    assert deltas == [final.output_text]
    assert MARKER.fullmatch(final.output_text)
    [call] = [item for item in final.output if item.type == "function_call"]
    history += [item.model_dump(exclude_none=True) for item in final.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "17"})
    second = gpt.responses.create(model="gpt-4o", tools=RESPONSES_TOOLS, input=history)

    assert without_marker(second.output_text) == "Echo: use tool please"
    assert_no_marker_reached(fake)
    kinds = [item.get("type") for item in sent(fake, "openai_responses")]
    assert kinds == [None, "function_call", "function_call_output"]
    first_log, second_log = requests_of(proxy_key, 2)
    assert first_log.conversation_id == second_log.conversation_id
    rows = active(second_log.conversation_id, "openai_responses")
    assert [(p, r) for p, r, _ in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "assistant"),
    ]
    assert rows_of(second_log.conversation_id) == 4
