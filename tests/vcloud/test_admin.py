"""Every model of the three apps has a working admin list, search and change page."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from tests import factories

pytestmark = pytest.mark.django_db

APPS = {"accounts", "memory_app", "telemetry_app"}


@pytest.fixture
def staff_client(client, django_user_model):
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(staff)
    return client


@pytest.fixture
def populated(account):
    factories.vckey_for(account, "admin-visible-key")
    conversation = factories.conversation_create(account, turns=3)
    factories.memory_graph_create(conversation)
    factories.ledger_create(account, conversation)
    return account


def _our_models():
    return [m for m in admin.site._registry if m._meta.app_label in APPS]


def test_every_model_of_the_three_apps_is_registered():
    from django.apps import apps

    ours = {m for m in apps.get_models() if m._meta.app_label in APPS}
    assert ours == set(_our_models())


def test_admin_changelists_and_change_pages_render_with_data(staff_client, populated):
    for model in _our_models():
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert staff_client.get(url, {"q": "a"}).status_code == 200, url
        obj = model.objects.first()
        assert obj is not None, opts.model_name
        change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        assert staff_client.get(change).status_code == 200, change


def test_admin_revoke_action(staff_client, account):
    key, _ = factories.vckey_for(account)
    url = reverse("admin:accounts_vckey_changelist")
    staff_client.post(url, {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_admin_needs_staff(client, account):
    client.force_login(account.owner)
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
