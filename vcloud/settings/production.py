"""Production: the scaled mode. Refuses to start without its secrets and services."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from vcloud.env import env_bool, env_str

for _name in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
    if not env_str(_name):
        raise ImproperlyConfigured(f"{_name} must be set in production")

from vcloud.settings.base import *  # noqa: E402,F403

DEBUG = False
# A shared deployment does not let accounts aim their upstreams at its own network.
VC_PRIVATE_UPSTREAMS = env_bool("VC_PRIVATE_UPSTREAMS", False)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
