"""A user tunes the memory settings: saves new values, then tries a bad combination."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect


def _sign_up(page: Page, base: str) -> None:
    page.goto(base + "/signup/")
    page.fill("#id_username", "memory-user")
    page.fill("#id_email", "memory@example.com")
    page.fill("#id_password1", "a-long-unusual-passphrase")
    page.fill("#id_password2", "a-long-unusual-passphrase")
    page.get_by_role("button", name="Sign up").click()
    expect(page).to_have_url(re.compile(r"/keys/$"))


def test_memory_settings_save_reload_and_refuse_a_bad_combination(page: Page, vcloud_server, shot):
    page.goto(vcloud_server.url + "/settings/memory/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/settings/memory/$"))
    _sign_up(page, vcloud_server.url)

    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("link", name="Account")).to_have_attribute("aria-current", "page")
    shot(page, "settings-account")
    page.get_by_role("link", name="Memory").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory settings")
    expect(page.locator("#id_protected_turns")).to_have_value("6")
    expect(page.locator("#id_soft_threshold")).to_have_value("0.7")
    shot(page, "memory-settings")

    page.fill("#id_protected_turns", "9")
    page.fill("#id_soft_threshold", "0.6")
    page.get_by_role("button", name="Save memory settings").click()
    expect(page.locator(".messages")).to_contain_text("Memory settings saved.")
    shot(page, "memory-settings-saved")
    page.reload()
    expect(page.locator("#id_protected_turns")).to_have_value("9")
    expect(page.locator("#id_soft_threshold")).to_have_value("0.6")

    page.fill("#id_soft_threshold", "0.9")
    page.fill("#id_hard_threshold", "0.8")
    page.get_by_role("button", name="Save memory settings").click()
    errors = page.locator("#memory-errors")
    expect(errors).to_contain_text("Soft threshold < Hard threshold")
    expect(page.locator("#id_soft_threshold")).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".messages")).to_have_count(0)
    shot(page, "memory-settings-error")

    page.goto(vcloud_server.url + "/settings/memory/")  # nothing of the bad post was saved
    expect(page.locator("#id_soft_threshold")).to_have_value("0.6")
    expect(page.locator("#id_hard_threshold")).to_have_value("0.85")
