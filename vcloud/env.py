"""Typed readers for environment variables.

Each reader returns the default when the variable is unset or empty and raises
``ImproperlyConfigured`` with the variable's name when its value cannot be read.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, "").strip() or default


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    raw = env_str(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name).lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_url(name: str, default: str = "", *, schemes: tuple[str, ...] = ("http", "https")) -> str:
    raw = env_str(name, default)
    if not raw:
        return ""
    parsed = urlparse(raw)
    if parsed.scheme not in schemes or not parsed.netloc:
        raise ImproperlyConfigured(f"{name} must be a URL with scheme {'/'.join(schemes)}")
    return raw.rstrip("/")


def env_path(name: str, default: Path) -> Path:
    raw = env_str(name)
    return Path(raw).expanduser().resolve() if raw else default
