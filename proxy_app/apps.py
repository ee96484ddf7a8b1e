from __future__ import annotations

from django.apps import AppConfig


class ProxyAppConfig(AppConfig):
    name = "proxy_app"
    verbose_name = "Proxy"
