"""vcloud: a virtual context window for LLM applications."""

from __future__ import annotations

from vcloud.celery import app as celery_app

__all__ = ["celery_app"]
