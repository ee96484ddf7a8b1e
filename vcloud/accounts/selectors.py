"""Account-scoped reads."""

from __future__ import annotations

from django.db.models import QuerySet

from vcloud.accounts.models import Account, VCKey
from vcloud.accounts.services import vckey_hash


def vckeys_for_account(*, account: Account) -> QuerySet[VCKey]:
    return VCKey.objects.filter(account=account).order_by("revoked_at", "-created_at")


def vckey_get(*, account: Account, key_id: int) -> VCKey | None:
    return VCKey.objects.filter(account=account, pk=key_id).first()


def vckey_resolve(raw: str) -> VCKey | None:
    """The active key for a raw vckey, with its account, or None."""
    if not raw or len(raw) > 200:
        return None
    return (
        VCKey.objects.select_related("account")
        .filter(key_hash=vckey_hash(raw), revoked_at__isnull=True)
        .first()
    )
