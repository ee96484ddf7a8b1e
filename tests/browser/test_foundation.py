"""A newcomer signs up, creates a key, copies the SDK lines and revokes the key."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect


def test_signup_key_snippets_and_revoke(page: Page, vcloud_server, shot):
    page.goto(vcloud_server.url + "/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("stale history")
    shot(page, "landing")

    page.get_by_role("link", name="Sign up").first.click()
    page.fill("#id_username", "browser-user")
    page.fill("#id_email", "not-an-email")
    page.fill("#id_password1", "a-long-unusual-passphrase")
    page.fill("#id_password2", "a-long-unusual-passphrase")
    page.get_by_role("button", name="Sign up").click()
    expect(page.locator("#id_email-errors")).to_contain_text("valid email")
    shot(page, "signup-error")

    page.fill("#id_email", "browser@example.com")
    page.fill("#id_password1", "a-long-unusual-passphrase")
    page.fill("#id_password2", "a-long-unusual-passphrase")
    page.get_by_role("button", name="Sign up").click()
    expect(page).to_have_url(re.compile(r"/keys/$"))

    page.fill("#id_name", "my-laptop")
    page.get_by_role("button", name="Create key").click()
    raw = page.locator("#raw-key").inner_text()
    assert raw.startswith("vck_")
    expect(page.locator("#snippets")).to_contain_text(f'base_url="{vcloud_server.url}/v/{raw}/v1"')
    expect(page.locator("#key-list")).to_contain_text("my-laptop")
    shot(page, "keys-created")

    page.reload()  # a fresh visit never shows the raw key again
    page.goto(vcloud_server.url + "/keys/")
    expect(page.locator("body")).not_to_contain_text(raw)

    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("#key-list")).to_contain_text("revoked")
    shot(page, "keys-revoked")

    page.get_by_role("button", name=re.compile("Log out")).click()
    expect(page.get_by_role("navigation").get_by_role("link", name="Log in")).to_be_visible()
