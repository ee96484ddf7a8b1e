"""A long conversation through the proxy, then its session page: the timeline,
the context-window viewer of the planned request, quote search, "Compact now"
with its progress, and a new request appearing live."""

from __future__ import annotations

import re
import time
from typing import Any

import anthropic
import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_up_with_a_key
from tests.memory_app.corpus import conversation_texts
from tests.support.server import Server

SESSION = "browser-long-session"


def _sign_up_with_a_low_ceiling(page: Page, base: str) -> str:
    """A new user, a 2,000-token ceiling with payload capture on, and a key."""
    raw = sign_up_with_a_key(page, base, "session-user")
    page.goto(base + "/settings/")
    page.fill("#id_context_ceiling", "2000")
    page.check("#id_capture_payloads")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_be_visible()
    return raw


def _settled(base: str, raw: str, conversation_id: int, turns: int) -> dict[str, Any]:
    """The conversation once ``turns`` are stored and its background work is done."""
    deadline = time.monotonic() + 90
    while True:
        detail = httpx.get(
            f"{base}/api/v1/conversations/{conversation_id}",
            headers={"Authorization": f"Bearer {raw}"},
            timeout=10,
        ).json()
        if detail["pending_jobs"] == 0 and detail["turns"] == turns:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"background work did not finish: {detail}")
        time.sleep(0.2)


def _long_conversation(base: str, raw: str) -> tuple[anthropic.Anthropic, list[Any], int]:
    """A long history (forwarded as sent, then compacted), and a follow-up that is
    over the ceiling with compacted history: the planner fits it."""
    claude = anthropic.Anthropic(
        api_key="sk-provider-secret",
        base_url=f"{base}/v/{raw}",
        max_retries=0,
        default_headers={"X-VC-Session": SESSION},
    )
    history: list[Any] = [{"role": r, "content": t} for r, t in conversation_texts(rounds=3)]
    history.append({"role": "user", "content": "What did the contractor quote for cabinets?"})
    reply = claude.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=50, messages=history
    )
    conversation_id = int(reply.headers["x-vc-conversation"])
    detail = _settled(base, raw, conversation_id, turns=len(history) + 1)
    assert detail["watermark"] > 0
    assert detail["segments"] > 0
    history += [
        {"role": "assistant", "content": reply.parse().content[0].text},
        {"role": "user", "content": "And the plumbing for the sink?"},
    ]
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=history)
    _settled(base, raw, conversation_id, turns=len(history) + 1)
    return claude, history, conversation_id


def test_the_session_page_shows_the_window_search_compaction_and_live_requests(
    page: Page, proxy_server: Server, shot
):
    base = proxy_server.url
    raw = _sign_up_with_a_low_ceiling(page, base)
    claude, history, conversation_id = _long_conversation(base, raw)

    page.goto(f"{base}/dashboard/sessions/")
    page.get_by_role("link", name=SESSION).first.click()
    expect(page).to_have_url(re.compile(rf"/dashboard/sessions/{conversation_id}/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(SESSION)
    expect(page.locator("#session-requests tbody tr")).to_have_count(2)
    turns = page.locator("#session-turns tbody tr")
    expect(turns.last).to_contain_text("Echo:")  # the newest page comes first: the last reply
    expect(page.locator("[data-counter=watermark]")).not_to_have_text("0")
    page.get_by_role("link", name="« Oldest").first.click()
    expect(turns).to_have_count(50)
    expect(turns.first.locator(".badge.compacted")).to_be_visible()
    expect(page.locator("#session-segments tbody tr").first).to_contain_text("–")
    expect(page.locator("#session-tag-summaries tbody tr").first).to_be_visible()
    expect(page.locator("#facts-empty")).to_have_text(
        "Fact extraction is not built yet; facts will appear here."
    )
    expect(page.locator("#live-status")).to_have_text("live")

    # The newest request was planned: open its context window.
    newest = page.locator("#session-requests tbody tr").first
    expect(newest).to_contain_text("planned")
    newest.get_by_role("link", name="Window").click()
    viewer = page.locator("#context-viewer")
    expect(viewer).to_be_visible()
    expect(page.locator("#ctx-tokens")).to_contain_text("Client sent")
    expect(page.locator("#ctx-tokens")).to_contain_text("sent upstream")
    for part in ["stable", "window", "recall", "headroom"]:  # no system prompt: no "fixed"
        expect(page.locator(f"#ctx-bar [data-part={part}]")).to_be_visible()
    expect(page.locator("#ctx-spans")).to_contain_text("represented by memory")
    recalled = page.locator("#ctx-recalled tbody tr")
    expect(recalled.first).to_be_visible()
    expect(page.locator("#ctx-recalled")).to_contain_text("sink")
    expect(page.locator("#ctx-reasons li").first).to_be_visible()
    page.locator("#ctx-payload summary").click()
    payload = page.locator("#ctx-payload pre")
    expect(payload).to_contain_text("<virtual-context>")
    expect(payload).not_to_contain_text("sk-provider-secret")
    shot(page, "context-viewer")

    # "Compact now": the job is queued, its progress shows, it finishes.
    page.get_by_role("button", name="Compact now").click()
    expect(page.locator(".messages")).to_contain_text(re.compile("Memory job|already waiting"))
    first_job = page.locator("#session-jobs tbody tr").first
    expect(first_job).to_contain_text("done", timeout=30_000)
    expect(page.locator("[data-counter=pending_jobs]")).to_have_text("0", timeout=10_000)
    expect(page.locator("#job-progress")).to_be_hidden()

    # A new request of this session appears without a reload.
    page.evaluate("window.__notReloaded = true")
    history += [
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Remind me of the JR Pass price?"},
    ]
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=history)
    expect(page.locator("#session-requests tbody tr")).to_have_count(3, timeout=10_000)
    expect(page.locator("#session-counters [data-counter=requests]")).to_have_text("3")
    expect(page.locator("#requests h2")).to_have_text("Requests 3")
    expect(page.locator("#session-requests tbody tr").first).to_contain_text("Window")
    assert page.evaluate("window.__notReloaded") is True

    # Quote search, through the JSON API with the browser session.
    page.locator("#quote-query").fill("")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#quote-error")).to_contain_text("Type a word or phrase")
    page.locator("#quote-query").fill("cabinets")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#quote-error")).to_be_hidden()
    hits = page.locator("#quote-hits li")
    expect(hits.first).to_contain_text("cabinet")
    expect(page.locator("[data-counter=pending_jobs]")).to_have_text("0", timeout=30_000)
    shot(page, "session-detail")
