"""A newcomer signs up, creates a key, sends SDK requests through the proxy and
watches them arrive live on the overview; then the sessions, savings (with its
CSV export) and telemetry pages."""

from __future__ import annotations

import csv
import io
import re

import anthropic
import openai
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_up_with_a_key
from tests.support.server import Server

SESSION = "browser-trip-planning"


def _sign_up_with_a_key(page: Page, base: str, name: str = "dashboard-user") -> str:
    return sign_up_with_a_key(page, base, name)


def _ask(base: str, raw: str, text: str) -> None:
    claude = anthropic.Anthropic(api_key="sk-provider-secret", base_url=f"{base}/v/{raw}")
    claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": text}]
    )


def _chat(base: str, raw: str) -> None:
    """Three turns of one Anthropic conversation and one OpenAI request."""
    claude = anthropic.Anthropic(
        api_key="sk-provider-secret",
        base_url=f"{base}/v/{raw}",
        max_retries=0,
        default_headers={"X-VC-Session": SESSION},
    )
    history: list[dict[str, str]] = []
    for question in ["Plan a week in Lisbon.", "Add a day trip to Sintra.", "What about food?"]:
        history.append({"role": "user", "content": question})
        reply = claude.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=history)
        history.append({"role": "assistant", "content": reply.content[0].text})
    gpt = openai.OpenAI(api_key="sk-provider-secret", base_url=f"{base}/v/{raw}/v1", max_retries=0)
    gpt.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello from OpenAI"}]
    )


def test_requests_appear_live_then_sessions_savings_and_csv(
    page: Page, proxy_server: Server, shot, tmp_path
):
    base = proxy_server.url
    raw = _sign_up_with_a_key(page, base)

    page.get_by_role("navigation").get_by_role("link", name="Overview").click()
    expect(page).to_have_url(re.compile(r"/dashboard/$"))
    expect(page.locator("#live-grid")).to_contain_text("No requests yet")
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.__notReloaded = true")

    _chat(base, raw)

    rows = page.locator("#live-grid tbody tr")
    expect(rows).to_have_count(4, timeout=10_000)
    expect(rows.first).to_contain_text("gpt-4o-mini")
    expect(rows.first).to_contain_text("200")
    expect(rows.nth(1)).to_contain_text("claude-sonnet-4-5")
    expect(page.locator("#live-grid")).not_to_contain_text("…")  # every row is done
    expect(page.locator("#kpis [data-live-add=requests]").first).to_have_text("4")
    assert page.evaluate("window.__notReloaded") is True  # no reload happened
    shot(page, "dashboard-overview-live")

    page.reload()  # the stored rows and the rollups agree with what came live
    expect(page.locator("#live-grid tbody tr")).to_have_count(4)
    expect(page.locator("#kpis [data-live-add=requests]").first).to_have_text("4")
    expect(page.locator("#usage-chart svg")).to_be_visible()
    shot(page, "dashboard-overview")

    page.get_by_role("navigation").get_by_role("link", name="Sessions").click()
    sessions = page.locator("#session-list tbody tr")
    expect(sessions).to_have_count(2)
    expect(page.locator("#session-list")).to_contain_text(SESSION)
    page.fill("#id_q", "trip")
    page.get_by_role("button", name="Filter").click()
    expect(sessions).to_have_count(1)
    expect(sessions.first.locator("[data-field=requests]")).to_have_text("3")
    shot(page, "dashboard-sessions")
    sessions.first.get_by_role("link").first.click()
    expect(page).to_have_url(re.compile(r"/dashboard/sessions/\d+/$"))
    expect(page.locator("#session-requests tbody tr")).to_have_count(3)

    page.get_by_role("navigation").get_by_role("link", name="Savings").click()
    expect(page.locator("#baseline-assumption")).to_contain_text("full history the client sent")
    expect(page.locator("#by-model")).to_contain_text("claude-sonnet-4-5")
    expect(page.locator("#by-session")).to_contain_text(SESSION)
    shot(page, "dashboard-savings")
    with page.expect_download() as download_info:
        page.locator("#csv-export").click()
    download = download_info.value
    assert download.suggested_filename.startswith("vcloud-savings-")
    path = tmp_path / "savings.csv"
    download.save_as(path)
    rows_csv = list(csv.DictReader(io.StringIO(path.read_text())))
    total = next(r for r in rows_csv if r["breakdown"] == "total")
    assert total["requests"] == "4"
    assert {r["label"] for r in rows_csv if r["breakdown"] == "model"} >= {
        "claude-sonnet-4-5",
        "gpt-4o-mini",
    }

    page.get_by_role("navigation").get_by_role("link", name="Telemetry").click()
    expect(page.locator("#components")).to_contain_text("proxy_upstream")
    expect(page.locator("#recent-calls tbody tr")).to_have_count(4)
    shot(page, "dashboard-telemetry")


def test_the_live_socket_reconnects_after_a_drop(page: Page, proxy_server: Server):
    sockets: list = []

    def relay(ws) -> None:  # pass everything through, but keep a handle to cut it
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/live/$"), relay)
    raw = _sign_up_with_a_key(page, proxy_server.url, "reconnect-user")
    page.goto(proxy_server.url + "/dashboard/")
    status = page.locator("#live-status")
    expect(status).to_have_text("live")

    sockets[0].close(code=4000, reason="network drop")
    expect(status).to_have_attribute("data-state", "reconnecting")
    expect(status).to_have_text("live", timeout=10_000)
    assert len(sockets) == 2

    _ask(proxy_server.url, raw, "Still there after the drop?")
    expect(page.locator("#live-grid tbody tr")).to_have_count(1, timeout=10_000)
    expect(page.locator("#live-grid tbody tr").first).to_contain_text("claude-sonnet-4-5")
