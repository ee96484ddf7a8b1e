from __future__ import annotations

import html

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tests import factories
from vcloud.accounts.models import VCKey
from vcloud.accounts.selectors import vckey_resolve
from vcloud.accounts.services import vckey_hash

pytestmark = pytest.mark.django_db

GOOD = {
    "username": "newbie",
    "email": "newbie@example.com",
    "password1": "a-long-unusual-passphrase",
    "password2": "a-long-unusual-passphrase",
}


def test_signup_creates_user_account_and_logs_in(client):
    response = client.post(reverse("signup"), GOOD)
    assert response.status_code == 302
    assert response["Location"] == reverse("keys")
    user = get_user_model().objects.get(username="newbie")
    assert user.email == "newbie@example.com"
    assert user.account.name == "newbie"
    assert client.get(reverse("keys")).status_code == 200


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"password2": "something-else-entirely"}, "password2", "didn’t match"),
        ({"password1": "short", "password2": "short"}, "password2", "too short"),
        ({"email": "not-an-email"}, "email", "valid email"),
        ({"email": ""}, "email", "required"),
        ({"username": ""}, "username", "required"),
        ({"username": "bad name!"}, "username", "valid username"),
    ],
)
def test_signup_rejects_bad_input_with_form_errors(client, change, field, message):
    response = client.post(reverse("signup"), {**GOOD, **change})
    assert response.status_code == 200
    errors = " ".join(response.context["form"].errors[field])
    assert message in errors
    assert message in response.content.decode()
    assert not get_user_model().objects.filter(username=GOOD["username"]).exists()


def test_signup_rejects_taken_username_and_email(client, account):
    response = client.post(reverse("signup"), {**GOOD, "username": "alice"})
    assert "already exists" in " ".join(response.context["form"].errors["username"])
    response = client.post(reverse("signup"), {**GOOD, "email": "ALICE@example.com"})
    assert "already exists" in " ".join(response.context["form"].errors["email"])


def test_login_and_logout(client, account):
    response = client.post(
        reverse("login"), {"username": "alice", "password": "correct-horse-battery"}
    )
    assert response.status_code == 302
    assert client.get(reverse("keys")).status_code == 200
    client.post(reverse("logout"))
    response = client.get(reverse("keys"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_login_with_wrong_password_shows_error(client, account):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert "correct username and password" in response.content.decode()


def test_pages_need_login(client):
    for name in ("keys", "settings"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert reverse("login") in response["Location"]


def test_landing_page_is_public(client):
    response = client.get(reverse("landing"))
    assert response.status_code == 200
    assert "virtual context window" in response.content.decode()


def test_key_create_shows_raw_key_once_and_stores_only_hash(logged_in, account):
    response = logged_in.post(reverse("keys"), {"name": "laptop"})
    assert response.status_code == 201
    raw = response.context["raw_key"]
    assert raw.startswith("vck_")
    assert len(raw) > 30
    key = VCKey.objects.get(account=account)
    assert key.name == "laptop"
    assert key.key_hash == vckey_hash(raw)
    assert key.prefix == raw[:12]
    assert raw not in {str(v) for v in VCKey.objects.values_list(flat=True)}
    body = html.unescape(response.content.decode())
    assert f'base_url="http://testserver/v/{raw}"' in body
    assert f'base_url="http://testserver/v/{raw}/v1"' in body
    assert f'http_options={{"base_url": "http://testserver/v/{raw}"}}' in body
    # A later visit never shows the raw key again.
    later = logged_in.get(reverse("keys")).content.decode()
    assert raw not in later
    assert f"{key.prefix}…" in later


def test_key_create_requires_a_name(logged_in, account):
    response = logged_in.post(reverse("keys"), {"name": ""})
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not VCKey.objects.exists()


def test_key_list_shows_columns(logged_in, account):
    key, _ = factories.vckey_for(account, "ci-runner")
    key.request_count = 1234
    key.save()
    body = logged_in.get(reverse("keys")).content.decode()
    for text in ("ci-runner", f"{key.prefix}…", "1,234", "never", "active"):
        assert text in body


def test_revoked_key_stops_resolving(logged_in, account):
    key, raw = factories.vckey_for(account)
    assert vckey_resolve(raw) == key
    response = logged_in.post(reverse("key_revoke", args=[key.pk]))
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert vckey_resolve(raw) is None
    assert "revoked" in logged_in.get(reverse("keys")).content.decode()


def test_revoke_needs_post(logged_in, account):
    key, _ = factories.vckey_for(account)
    assert logged_in.get(reverse("key_revoke", args=[key.pk])).status_code == 405


def test_unknown_key_does_not_resolve(db):
    assert vckey_resolve("vck_nope") is None
    assert vckey_resolve("") is None


def test_settings_page_saves_and_validates(logged_in, account):
    response = logged_in.post(
        reverse("settings"),
        {"context_ceiling": "500", "upstream_openai": "not a url"},
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "at least 1,000" in errors["context_ceiling"][0]
    assert "valid URL" in errors["upstream_openai"][0]
    response = logged_in.post(
        reverse("settings"),
        {
            "context_ceiling": "32000",
            "upstream_openai": "http://localhost:8000",
            "cache_aware_layout": "on",
        },
    )
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.context_ceiling == 32000
    assert account.upstream_for("openai") == "http://localhost:8000"


def test_reposting_the_same_create_form_makes_no_second_key(logged_in, account):
    form = {"name": "once", "nonce": "n-123"}
    assert logged_in.post(reverse("keys"), form).status_code == 201
    response = logged_in.post(reverse("keys"), form)
    assert response.status_code == 302
    assert VCKey.objects.filter(account=account).count() == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://localhost:8000",
        "http://10.1.2.3/v1",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080",
        "http://[::ffff:192.168.1.5]",
    ],
)
def test_a_shared_deployment_refuses_upstreams_on_its_own_network(
    logged_in, account, settings, url
):
    settings.VC_PRIVATE_UPSTREAMS = False
    response = logged_in.post(
        reverse("settings"), {"context_ceiling": "16000", "upstream_openai": url}
    )
    assert response.status_code == 200
    assert "internal address" in response.context["form"].errors["upstream_openai"][0]
    account.refresh_from_db()
    assert account.upstream_for("openai") == ""


def test_a_public_upstream_is_accepted_where_internal_ones_are_refused(
    logged_in, account, settings
):
    settings.VC_PRIVATE_UPSTREAMS = False
    response = logged_in.post(
        reverse("settings"),
        {"context_ceiling": "16000", "upstream_gemini": "https://93.184.216.34/gemini"},
    )
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.upstream_for("gemini") == "https://93.184.216.34/gemini"
