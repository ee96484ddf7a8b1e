"""The Celery app. Embedded mode runs tasks in-process (no broker); with
REDIS_URL set, `make worker` starts workers that take them from Redis."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vcloud.settings.base")

app = Celery("vcloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
