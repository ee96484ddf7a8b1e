"""The memory end to end: a long conversation posted through the proxy with the
official SDK is tagged, compacted and summarised in the background, and the
API shows it — segments, tag summaries, and ``pending_jobs`` reaching 0."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest

from memory_app.models import Segment, TagSummary, Turn
from tests.fakes.provider import FakeProvider
from tests.memory_app.corpus import conversation_texts
from tests.proxy_app.conftest import ProxyKey

pytestmark = pytest.mark.usefixtures("orm")


def _api(proxy_key: ProxyKey, path: str, raw_key: str | None = None) -> httpx.Response:
    return httpx.get(
        f"{proxy_key.server.url}/api/v1/{path}",
        headers={"Authorization": f"Bearer {raw_key or proxy_key.raw}"},
        timeout=10,
    )


def _post(proxy_key: ProxyKey, path: str, body: Any, raw_key: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{proxy_key.server.url}/api/v1/{path}",
        json=body,
        headers={"Authorization": f"Bearer {raw_key or proxy_key.raw}"},
        timeout=30,
    )


def _settled(
    proxy_key: ProxyKey, conversation_id: int, turns: int, timeout: float = 60
) -> dict[str, Any]:
    """The conversation once its ``turns`` are stored and all its work is done."""
    deadline = time.monotonic() + timeout
    while True:
        detail = _api(proxy_key, f"conversations/{conversation_id}").json()
        done = detail["pending_jobs"] == 0 and not _untagged(conversation_id)
        if done and detail["turns"] == turns:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"background work did not finish: {detail}")
        time.sleep(0.2)


def _untagged(conversation_id: int) -> bool:
    return Turn.objects.filter(conversation_id=conversation_id, tagged=False).exists()


def test_a_long_history_is_compacted_in_the_background_and_shown_by_the_api(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey
) -> None:
    proxy_key.account.context_ceiling = 2_000
    proxy_key.account.save()
    history: Any = [{"role": r, "content": t} for r, t in conversation_texts(rounds=3)]
    history.append({"role": "user", "content": "What did the contractor quote for cabinets?"})

    raw = claude.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=50, messages=history
    )
    conversation_id = int(raw.headers["x-vc-conversation"])
    # The history, the question and the reply are stored, then processed.
    detail = _settled(proxy_key, conversation_id, turns=len(history) + 1)

    assert detail["segments"] > 0
    assert detail["tag_summaries"] > 0
    assert detail["watermark"] > 0
    assert detail["jobs"][0]["state"] == "done"
    segments = _api(proxy_key, f"conversations/{conversation_id}/segments").json()
    assert [s["start_position"] for s in segments][0] == 0
    assert all(s["tags"] and s["summary"] for s in segments)
    summaries = _api(proxy_key, f"conversations/{conversation_id}/tag-summaries").json()
    assert {s["tag"] for s in summaries}
    assert Segment.objects.filter(conversation_id=conversation_id).count() == len(segments)
    assert TagSummary.objects.filter(conversation_id=conversation_id).count() == len(summaries)

    # The first request went upstream as sent: nothing was compacted yet.
    assert len(fake.requests[-1].json["messages"]) == len(history)

    # The next request adds two turns; the job runs again and settles.
    history += [
        {"role": "assistant", "content": raw.parse().content[0].text},
        {"role": "user", "content": "And the plumbing for the sink?"},
    ]
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=history)
    detail = _settled(proxy_key, conversation_id, turns=len(history) + 1)
    assert detail["jobs"][0]["state"] == "done"

    # Over the ceiling with compacted history: the payload is planned.
    sent = fake.requests[-1].json
    assert len(sent["messages"]) < len(history)
    assert "<virtual-context>" in json.dumps(sent["system"])
    # The client set no cache mark: ours end the memory block and the latest
    # message's own content; what was recalled for it follows, unmarked.
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    latest = sent["messages"][-1]
    assert latest["role"] == "user"
    question, recalled_block = latest["content"]
    assert question == {
        "type": "text",
        "text": history[-1]["content"],
        "cache_control": {"type": "ephemeral"},
    }
    assert "cache_control" not in recalled_block
    assert "cache_control" not in json.dumps(sent["messages"][:-1])
    recalled = recalled_block["text"]
    assert "Recalled from earlier" in recalled
    assert "sink" in recalled  # earlier turns about the sink, found for this question
    assert len(json.dumps(sent)) < len(json.dumps(history))
    assert detail["watermark"] > 0
    _assert_context_records(proxy_key, conversation_id, ceiling=2_000)


def _assert_context_records(proxy_key: ProxyKey, conversation_id: int, ceiling: int) -> None:
    """The API shows what each planned request's window held, and why."""
    requests = _api(proxy_key, f"conversations/{conversation_id}/requests").json()
    newest, first = requests[0], requests[-1]
    path = f"conversations/{conversation_id}/requests/{newest['request_id']}/context"
    context = _api(proxy_key, path).json()
    assert context["planned"] is True
    assert context["ceiling"] == ceiling
    assert context["client_tokens"] > context["upstream_tokens"]
    report = context["report"]
    parts = report["parts"]
    assert sum(n for k, n in parts.items() if k != "headroom") + parts["headroom"] == ceiling
    assert report["dropped"]  # old turns left out of the window …
    assert report["recalled"]  # … and recalled ones, with how each signal saw them
    assert all(item["signals"] and item["score"] for item in report["recalled"])
    assert any("sink" in item["preview"] for item in report["recalled"])
    assert context["payload"] == ""  # the account does not capture payloads
    # The saving is on record: the client's tokens, scaled from the provider's count.
    assert newest["client_tokens"] > newest["upstream_tokens"] > 0

    # The first request was forwarded as sent: nothing had been compacted yet.
    first_context = _api(
        proxy_key, f"conversations/{conversation_id}/requests/{first['request_id']}/context"
    ).json()
    assert first_context["planned"] is False
    assert first_context["report"]["reasons"] == ["nothing compacted yet: forwarded as sent"]
    assert first["client_tokens"] == first["upstream_tokens"]

    # Quote search finds the stored turns, best first, with an excerpt.
    found = _post(proxy_key, f"conversations/{conversation_id}/search", {"query": "cabinets"})
    assert found.status_code == 200
    hits = found.json()
    assert hits
    assert "cabinet" in hits[0]["excerpt"].lower()
    assert hits[0]["score"] >= hits[-1]["score"]
    bad = _post(proxy_key, f"conversations/{conversation_id}/search", {"query": ""})
    assert bad.status_code == 422


def test_the_api_never_shows_another_accounts_conversation(
    claude: anthropic.Anthropic, fake: FakeProvider, proxy_key: ProxyKey, request: Any
) -> None:
    raw = claude.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=20, messages=[{"role": "user", "content": "hello"}]
    )
    conversation_id = int(raw.headers["x-vc-conversation"])
    other: ProxyKey = request.getfixturevalue("other_proxy_key")

    assert _api(proxy_key, f"conversations/{conversation_id}").status_code == 200
    response = _api(other, f"conversations/{conversation_id}")
    assert response.status_code == 404
    assert response.json() == {"detail": "conversation not found"}
    assert _api(other, f"conversations/{conversation_id}/segments").status_code == 404
    context = _api(other, f"conversations/{conversation_id}/requests/any/context")
    assert context.status_code == 404
    assert context.json() == {"detail": "conversation not found"}
    search = _post(other, f"conversations/{conversation_id}/search", {"query": "hello"})
    assert search.status_code == 404
    assert all(c["id"] != conversation_id for c in _api(other, "conversations").json())
    assert _api(proxy_key, "conversations", raw_key="vck_wrong").status_code == 401
