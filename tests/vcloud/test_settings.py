from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from vcloud import env


def test_env_readers_parse_and_reject(monkeypatch):
    monkeypatch.setenv("VC_X", "12")
    assert env.env_int("VC_X", 1) == 12
    monkeypatch.setenv("VC_X", "twelve")
    with pytest.raises(ImproperlyConfigured, match="VC_X must be an integer"):
        env.env_int("VC_X", 1)
    monkeypatch.setenv("VC_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="boolean"):
        env.env_bool("VC_X", False)
    monkeypatch.setenv("VC_X", "ftp://x")
    with pytest.raises(ImproperlyConfigured, match="URL"):
        env.env_url("VC_X")
    monkeypatch.delenv("VC_X")
    assert env.env_url("VC_X", "https://api.example.com/") == "https://api.example.com"


def _settings_import(module: str, **extra: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"}
    }
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env={**clean, **extra},
        capture_output=True,
        text=True,
        check=False,
    )


def test_production_refuses_to_start_without_secrets():
    result = _settings_import("vcloud.settings.production")
    assert result.returncode != 0
    assert "SECRET_KEY must be set in production" in result.stderr


def test_production_starts_with_its_secrets(tmp_path):
    result = _settings_import(
        "vcloud.settings.production",
        SECRET_KEY="x" * 50,
        DATABASE_URL="postgres://u@127.0.0.1:5432/db",
        REDIS_URL="redis://127.0.0.1:6379/0",
        VC_DATA_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr


def test_embedded_defaults_need_no_env(tmp_path):
    code = (
        "import vcloud.settings.base as s;"
        "print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'],"
        " s.CELERY_TASK_ALWAYS_EAGER)"
    )
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "VC_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "True",
    ]
    assert (tmp_path).is_dir()
