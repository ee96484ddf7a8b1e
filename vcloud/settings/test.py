"""Test settings: the backends the environment selects, fast password hashing,
and a throwaway data directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

from vcloud.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATA_DIR = Path(tempfile.mkdtemp(prefix="vcloud-test-"))
STATIC_ROOT = DATA_DIR / "static"

# A file, not :memory:, so a server process started by the end-to-end tests can
# share the test database.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}  # noqa: F405
