"""Browser tests: Playwright driving Debian's Chromium against a real server process.

Run in their own pytest process (`make test-browser`): pytest-playwright's event
loop and pytest-asyncio's do not mix. Screenshots land in var/screenshots/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.provider import start_fake_provider
from tests.support.server import ROOT, Server, start_server

SCREENSHOTS = ROOT / "var" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture(scope="session")
def vcloud_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("browser-data"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy_server(tmp_path_factory) -> Iterator[Server]:
    """vcloud with every provider format pointing at the fake provider
    (one per test module: each module signs up its own users)."""
    fake = start_fake_provider()
    server = start_server(
        tmp_path_factory.mktemp("proxy-data"),
        DATABASE_URL="",
        REDIS_URL="",
        VC_UPSTREAM_ANTHROPIC=fake.url,
        VC_UPSTREAM_OPENAI=fake.url,
        VC_UPSTREAM_GEMINI=fake.url,
        VC_EMBEDDER="hashing",
    )
    yield server
    server.stop()
    fake.stop()


def sign_up_with_a_key(page: Page, base: str, name: str) -> str:
    """A new user signed up in the browser, with a key; the raw key."""
    page.goto(base + "/signup/")
    page.fill("#id_username", name)
    page.fill("#id_email", f"{name}@example.com")
    page.fill("#id_password1", "a-long-unusual-passphrase")
    page.fill("#id_password2", "a-long-unusual-passphrase")
    page.get_by_role("button", name="Sign up").click()
    expect(page).to_have_url(re.compile(r"/keys/$"))
    page.fill("#id_name", "browser-sdk")
    page.get_by_role("button", name="Create key").click()
    return page.locator("#raw-key").inner_text()


@pytest.fixture
def shot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
