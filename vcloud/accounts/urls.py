from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from vcloud.accounts import views

urlpatterns = [
    path("", views.landing, name="landing"),
    path("signup/", views.signup, name="signup"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="accounts/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("keys/", views.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", views.key_revoke, name="key_revoke"),
    path("settings/", views.account_settings, name="settings"),
    path("settings/memory/", views.memory_settings, name="memory_settings"),
    path("settings/memory/export/", views.memory_settings_export, name="memory_settings_export"),
    path("settings/memory/import/", views.memory_settings_import, name="memory_settings_import"),
]
