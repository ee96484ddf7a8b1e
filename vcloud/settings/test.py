"""Test settings: the backends the environment selects, fast password hashing,
and a throwaway data directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

from vcloud.env import env_str
from vcloud.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATA_DIR = Path(tempfile.mkdtemp(prefix="vcloud-test-"))
STATIC_ROOT = DATA_DIR / "static"

# A file, not :memory:, so a server process started by the end-to-end tests can
# share the test database.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}  # noqa: F405

# The hashing embedder keeps the suite fast; the tests that need the real model
# load it themselves (memory_app.embedding.minilm_embedder).
VC_EMBEDDER = env_str("VC_EMBEDDER", "hashing")
