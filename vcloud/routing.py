"""Websocket routes (the dashboard's live updates)."""

from __future__ import annotations

from django.urls import path

from telemetry_app.consumers import LiveConsumer

websocket_urlpatterns = [path("ws/live/", LiveConsumer.as_asgi())]
