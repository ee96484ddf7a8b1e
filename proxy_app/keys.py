"""vckey → account resolution for the hot path, cached in the process.

A hit costs a dict lookup. Revocation reaches this process at once through
``key_cache_invalidate`` (called by the revoke service) and every other worker
within a second through ``key_cache_watch``, which polls the newest revocation
time. A new key needs no invalidation: misses are looked up and cached.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from proxy_app.db import db_call
from vcloud.accounts.models import VCKey
from vcloud.accounts.services import vckey_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ResolvedKey:
    key_id: int
    account_id: int
    prefix: str
    context_ceiling: int
    cache_aware_layout: bool
    capture_payloads: bool
    upstreams: dict[str, str]


# raw key → resolved key. Keyed by the raw key so a hit needs no hashing; the
# raw keys live only in this process's memory, as they do while a request runs.
_cache: dict[str, ResolvedKey] = {}
_MAX_ENTRIES = 100_000


def key_cache_invalidate(key_hash: str | None = None) -> None:
    """Forget cached keys (all of them: revocations are rare, misses are cheap)."""
    _cache.clear()


def _lookup(key_hash: str) -> ResolvedKey | None:
    key = (
        VCKey.objects.select_related("account")
        .filter(key_hash=key_hash, revoked_at__isnull=True)
        .first()
    )
    if key is None:
        return None
    account = key.account
    return ResolvedKey(
        key_id=key.pk,
        account_id=account.pk,
        prefix=key.prefix,
        context_ceiling=key.context_ceiling or account.context_ceiling,
        cache_aware_layout=account.cache_aware_layout,
        capture_payloads=account.capture_payloads,
        upstreams={p: account.upstream_for(p) for p in ("anthropic", "openai", "gemini")},
    )


async def key_resolve(raw: str) -> ResolvedKey | None:
    """The active key for a raw vckey, or None. Unknown keys are not cached."""
    hit = _cache.get(raw)
    if hit is not None:
        return hit
    if not raw or len(raw) > 200:
        return None
    resolved = await db_call(_lookup, vckey_hash(raw))
    if resolved is not None:
        if len(_cache) >= _MAX_ENTRIES:
            _cache.clear()
        _cache[raw] = resolved
    return resolved


def _revocation_stamp() -> tuple[object, ...]:
    from django.db.models import Count, Max

    from vcloud.accounts.models import Account

    keys = VCKey.objects.aggregate(n=Count("revoked_at"), last=Max("revoked_at"))
    # Account settings (ceiling, upstreams) live in the cached entries too.
    accounts = Account.objects.aggregate(last=Max("updated_at"))
    return keys["n"], keys["last"], accounts["last"]


async def key_cache_watch(interval: float = 0.5) -> None:
    """Drop the cache whenever a key is revoked anywhere. Runs for the process's life."""
    stamp = None
    while True:
        try:
            current = await db_call(_revocation_stamp)
            if stamp is not None and current != stamp:
                key_cache_invalidate()
            stamp = current
        except Exception:  # the database may be briefly away; keep watching
            log.exception("key cache watch failed")
        await asyncio.sleep(interval)
