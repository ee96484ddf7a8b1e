"""Browser tests: Playwright driving Debian's Chromium against a real server process.

Run in their own pytest process (`make test-browser`): pytest-playwright's event
loop and pytest-asyncio's do not mix. Screenshots land in var/screenshots/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.server import ROOT, start_server

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


@pytest.fixture
def shot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
