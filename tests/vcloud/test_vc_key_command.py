from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from vcloud.accounts.models import VCKey
from vcloud.accounts.selectors import vckey_resolve

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("vc_key", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_with_new_user_prints_only_the_key():
    out, _ = _run("create", "--user", "bot", "--create-user", "--password", "pw-for-bot-123")
    raw = out.strip()
    assert out == raw + "\n"
    assert raw.startswith("vck_")
    key = vckey_resolve(raw)
    assert key is not None
    assert key.account.owner.username == "bot"
    assert get_user_model().objects.get(username="bot").check_password("pw-for-bot-123")


def test_create_for_missing_user_without_flag_fails():
    with pytest.raises(CommandError, match="--create-user"):
        _run("create", "--user", "ghost")
    assert not VCKey.objects.exists()


def test_revoke_by_prefix(account):
    out, _ = _run("create", "--user", "alice")
    raw = out.strip()
    _run("revoke", raw[:12])
    assert vckey_resolve(raw) is None


def test_revoke_unknown_or_ambiguous_prefix_fails(account):
    _run("create", "--user", "alice")
    _run("create", "--user", "alice")
    with pytest.raises(CommandError, match="no active key"):
        _run("revoke", "vck_zzzzzzzz")
    with pytest.raises(CommandError, match="more than one"):
        _run("revoke", "vck_")
    assert VCKey.objects.filter(revoked_at__isnull=True).count() == 2
