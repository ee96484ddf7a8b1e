"""Which conversation a request belongs to, always within the key's account.

In order: the ``X-VC-Session`` header (the conversation is the pair account +
session id); else the signed session marker the proxy planted in an earlier
reply (a marker signed for another account does not verify and is ignored);
else a fingerprint of the conversation's opening (system + first turn), reused
only when the request continues a conversation (more than one turn).

Resolved conversations are cached in the process with the content hashes of
their stored turns, so the steady state needs no database round trip; the hot
path diffs the incoming history against those hashes to find what is new.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from django.conf import settings

from proxy_app.db import db_call
from proxy_app.formats.types import Exchange, Turn
from proxy_app.keys import ResolvedKey
from proxy_app.services import (
    ConversationRow,
    conversation_find,
    conversation_for_fingerprint,
    conversation_for_session,
)

_MAX_CACHED = 50_000


@dataclass(slots=True)
class ConversationState:
    id: int
    account_id: int
    hashes: list[str] = field(default_factory=list)


_states: dict[int, ConversationState] = {}
_aliases: dict[tuple[int, str], int] = {}  # (account, "s:<session>" | "f:<fp>") → id
_pending: dict[tuple[int, str], asyncio.Future[ConversationState]] = {}


def sessions_cache_clear() -> None:
    _states.clear()
    _aliases.clear()


def marker_token(account_id: int, conversation_id: int) -> str:
    return f"c{conversation_id}.{_signature(account_id, conversation_id)}"


def marker_verify(account_id: int, token: str) -> int | None:
    head, _, signature = token.partition(".")
    if not head.startswith("c") or not head[1:].isdigit():
        return None
    conversation_id = int(head[1:])
    expected = _signature(account_id, conversation_id)
    return conversation_id if hmac.compare_digest(expected, signature) else None


def _signature(account_id: int, conversation_id: int) -> str:
    message = f"vc-marker:{account_id}:{conversation_id}".encode()
    digest = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:12]).decode().rstrip("=")


def turn_hash(turn: Turn) -> str:
    """Identity of a turn across resends: role, text and tool ids, not the JSON
    (clients move cache_control marks and re-serialise fields between requests)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(turn.role.encode())
    h.update(b"\0")
    h.update(turn.text.encode("utf-8", "surrogatepass"))
    for ident in (*turn.tool_call_ids, "|", *turn.tool_result_ids, "|", *turn.kinds):
        h.update(b"\0" + ident.encode())
    return h.hexdigest()


def fingerprint(exchange: Exchange) -> str:
    opening = exchange.turns[0].text if exchange.turns else ""
    h = hashlib.blake2b(digest_size=16)
    h.update(exchange.system.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(opening.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


async def conversation_resolve(
    key: ResolvedKey, exchange: Exchange, session_id: str
) -> ConversationState:
    if session_id:
        return await _cached(
            key,
            f"s:{session_id}",
            lambda: db_call(
                conversation_for_session,
                account_id=key.account_id,
                key_id=key.key_id,
                session_id=session_id,
                format=exchange.format,
                model=exchange.model,
            ),
        )
    if exchange.marker:
        conversation_id = marker_verify(key.account_id, exchange.marker)
        if conversation_id is not None:
            state = await _by_id(key, conversation_id)
            if state is not None:
                return state
    fp = fingerprint(exchange)
    continuing = len(exchange.turns) > 1
    title = exchange.turns[0].text[:120] if exchange.turns else ""

    def load() -> Awaitable[ConversationRow]:
        return db_call(
            conversation_for_fingerprint,
            account_id=key.account_id,
            key_id=key.key_id,
            fingerprint=fp,
            format=exchange.format,
            model=exchange.model,
            title=title,
            reuse=continuing,
        )

    if not continuing:
        return _remember(key, f"f:{fp}", await load())
    return await _cached(key, f"f:{fp}", load)


async def _by_id(key: ResolvedKey, conversation_id: int) -> ConversationState | None:
    state = _states.get(conversation_id)
    if state is not None:
        return state if state.account_id == key.account_id else None
    row = await db_call(
        conversation_find, account_id=key.account_id, conversation_id=conversation_id
    )
    return _remember(key, None, row) if row else None


async def _cached(
    key: ResolvedKey, alias: str, load: Callable[[], Awaitable[ConversationRow]]
) -> ConversationState:
    cache_key = (key.account_id, alias)
    conversation_id = _aliases.get(cache_key)
    if conversation_id is not None and conversation_id in _states:
        return _states[conversation_id]
    pending = _pending.get(cache_key)
    if pending is not None:  # another request is loading the same conversation
        return await asyncio.shield(pending)
    future: asyncio.Future[ConversationState] = asyncio.get_running_loop().create_future()
    _pending[cache_key] = future
    try:
        state = _remember(key, alias, await load())
        future.set_result(state)
        return state
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # retrieved: no "never retrieved" warning when nobody waits
        raise
    finally:
        del _pending[cache_key]


def _remember(key: ResolvedKey, alias: str | None, row: ConversationRow) -> ConversationState:
    if len(_states) >= _MAX_CACHED:
        sessions_cache_clear()
    state = _states.get(row.id) or ConversationState(row.id, key.account_id, row.hashes)
    _states[row.id] = state
    if alias is not None:
        _aliases[(key.account_id, alias)] = row.id
    return state


def history_diff(stored: list[str], incoming: list[str]) -> tuple[int, int, int | None]:
    """Where the incoming history's new turns start.

    Returns ``(skip, position, replaced_from)``: ``incoming[skip:]`` are new and
    go at stored position ``position``; ``replaced_from`` is set when the client
    changed stored history (edit or truncation) from that position on. A client
    that dropped its oldest turns (a sliding window) is aligned, not duplicated.
    """
    offset = 0
    if incoming and stored and stored[0] != incoming[0]:
        try:
            offset = stored.index(incoming[0])
        except ValueError:
            offset = 0
    common = 0
    limit = min(len(stored) - offset, len(incoming))
    while common < limit and stored[offset + common] == incoming[common]:
        common += 1
    position = offset + common
    return common, position, position if position < len(stored) else None
