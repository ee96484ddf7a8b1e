"""Errors of the memory app (mapped to HTTP by the API's exception handler)."""

from __future__ import annotations


class MemoryAppError(Exception):
    """Base of memory errors."""


class ConversationNotFound(MemoryAppError):
    """No such conversation in this account (also: another account's id)."""


class RequestContextNotFound(MemoryAppError):
    """No context record for this request in this conversation of this account."""


class LockTimeout(MemoryAppError):
    def __init__(self, conversation_id: int) -> None:
        super().__init__(f"conversation {conversation_id} is locked by another worker")
        self.conversation_id = conversation_id


class ConfigError(MemoryAppError):
    """Memory settings that do not validate."""


class LLMError(MemoryAppError):
    """An internal role's LLM call failed for good (after any retries), or its
    reply was unusable. The message names the role, model and host, never the key."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the provider's HTTP status, None for network errors


class DemoError(MemoryAppError):
    """``vc demo`` cannot run: no server, or the server refused the demo's requests."""
