from __future__ import annotations

from django.apps import AppConfig


class TelemetryAppConfig(AppConfig):
    name = "telemetry_app"
    verbose_name = "Telemetry"
