from __future__ import annotations


class AccountError(Exception):
    """Base of account errors."""


class KeyNotFound(AccountError):
    pass


class AmbiguousKey(AccountError):
    pass
