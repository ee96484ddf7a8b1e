"""Shared fixtures. Data comes from the explicit builders in tests/factories.py."""

from __future__ import annotations

import pytest

from tests import factories


@pytest.fixture
def account(db):  # type: ignore[no-untyped-def]
    return factories.account_create(username="alice")


@pytest.fixture
def other_account(db):  # type: ignore[no-untyped-def]
    return factories.account_create(username="mallory")


@pytest.fixture
def logged_in(client, account):  # type: ignore[no-untyped-def]
    client.force_login(account.owner)
    return client
