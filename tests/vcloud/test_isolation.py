"""A second account sees none of the first account's rows, on any page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests import factories

pytestmark = pytest.mark.django_db


def test_second_account_sees_nothing_of_the_first(client, account, other_account):
    key, _ = factories.vckey_for(account, "alice-secret-key-name")
    conversation = factories.conversation_create(account, session_id="alice-session", turns=2)
    factories.ledger_create(account, conversation)
    client.force_login(other_account.owner)
    for name in ("keys", "settings", "landing"):
        body = client.get(reverse(name)).content.decode()
        assert "alice-secret-key-name" not in body
        assert key.prefix not in body
        assert "alice-session" not in body


def test_other_accounts_key_cannot_be_revoked(client, account, other_account):
    key, _ = factories.vckey_for(account)
    client.force_login(other_account.owner)
    response = client.post(reverse("key_revoke", args=[key.pk]))
    assert response.status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


def test_selecting_another_accounts_key_shows_own_key_instead(client, account, other_account):
    alice_key, _ = factories.vckey_for(account)
    own_key, _ = factories.vckey_for(other_account)
    client.force_login(other_account.owner)
    response = client.get(reverse("keys"), {"key": alice_key.pk})
    assert response.context["selected"] == own_key
    assert alice_key.prefix not in response.content.decode()
