"""The dashboard pages, mounted at /dashboard/."""

from __future__ import annotations

from django.urls import path

from telemetry_app import views

urlpatterns = [
    path("", views.overview, name="dashboard"),
    path("sessions/", views.sessions, name="sessions"),
    path("sessions/<int:conversation_id>/", views.session_detail, name="session_detail"),
    path("sessions/<int:conversation_id>/compact/", views.session_compact, name="session_compact"),
    path("savings/", views.savings, name="savings"),
    path("telemetry/", views.telemetry, name="telemetry"),
]
