"""Account and vckey actions."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.forms import ModelForm
from django.utils import timezone

from memory_app.config import MemoryConfig, config_to_dict
from vcloud.accounts.errors import AmbiguousKey, KeyNotFound
from vcloud.accounts.models import Account, VCKey

KEY_PREFIX = "vck_"
PREFIX_LENGTH = 12  # "vck_" + 8 characters: enough to tell keys apart in lists


def vckey_hash(raw: str) -> str:
    # Keys carry 240 random bits, so a fast unsalted hash is safe and lets the
    # proxy find a key by its hash in one indexed lookup.
    return hashlib.sha256(raw.encode()).hexdigest()


def account_for_user(user: AbstractBaseUser) -> Account:
    account = Account.objects.filter(owner=user).first()
    if account is None:
        account = Account.objects.create(owner=user, name=user.get_username())
    return account


def account_settings_update(*, form: ModelForm[Account]) -> Account:
    account = form.save()
    from proxy_app.keys import key_cache_invalidate

    key_cache_invalidate()
    return account


@transaction.atomic
def account_memory_settings_update(*, account: Account, config: MemoryConfig) -> Account:
    """Replace the account's memory settings with ``config``. The ``llm`` entry
    (the account's LLM override, read by memory_app.llm) is kept as stored."""
    # Re-read under a row lock so an LLM override saved meanwhile is not lost.
    locked = Account.objects.select_for_update().get(pk=account.pk)
    stored = locked.memory_settings if isinstance(locked.memory_settings, dict) else {}
    settings = config_to_dict(config)
    if "llm" in stored:
        settings["llm"] = stored["llm"]
    locked.memory_settings = settings
    locked.save(update_fields=["memory_settings", "updated_at"])
    account.memory_settings = settings
    return locked


@transaction.atomic
def vckey_create(*, account: Account, name: str) -> tuple[VCKey, str]:
    """Create a key; returns it with the raw key, which is never stored."""
    raw = KEY_PREFIX + secrets.token_urlsafe(30)
    key = VCKey.objects.create(
        account=account,
        name=name.strip() or "default",
        prefix=raw[:PREFIX_LENGTH],
        key_hash=vckey_hash(raw),
    )
    return key, raw


def vckey_revoke(*, key: VCKey) -> VCKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        from proxy_app.keys import key_cache_invalidate

        key_cache_invalidate(key.key_hash)
    return key


def vckey_revoke_by_prefix(*, prefix: str) -> VCKey:
    """Revoke the one active key whose prefix starts with ``prefix``."""
    prefix = prefix.strip()[:PREFIX_LENGTH]
    keys = list(VCKey.objects.filter(prefix__startswith=prefix, revoked_at__isnull=True)[:2])
    if not prefix or not keys:
        raise KeyNotFound(f"no active key starts with {prefix!r}")
    if len(keys) > 1:
        raise AmbiguousKey(f"more than one active key starts with {prefix!r}; give more of it")
    return vckey_revoke(key=keys[0])
