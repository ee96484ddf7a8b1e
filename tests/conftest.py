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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):  # type: ignore[no-untyped-def]
    """A transactional test ends with a flush, which also empties the price
    catalog its migration seeded; put it back for the tests that follow (and
    for the server process, which shares the test database)."""
    yield
    marker = item.get_closest_marker("django_db")
    transactional = "transactional_db" in getattr(item, "fixturenames", ()) or bool(
        marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0]))
    )
    if not transactional:
        return
    from pytest_django.plugin import blocking_manager_key

    from telemetry_app.models import ModelPrice
    from telemetry_app.services import price_catalog_load

    with item.config.stash[blocking_manager_key].unblock():
        if not ModelPrice.objects.exists():
            price_catalog_load()
