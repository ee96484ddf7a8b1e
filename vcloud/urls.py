from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from vcloud.api import api

admin.site.site_header = "vcloud administration"
admin.site.site_title = "vcloud admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("dashboard/", include("telemetry_app.urls")),
    path("", include("vcloud.accounts.urls")),
]
