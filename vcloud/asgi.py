"""The one ASGI entry point.

Provider routes (``/v/…``, ``/v1/…``, ``/v1beta/…``) go to the lean proxy app
ahead of Django (ARCHITECTURE.md, "The hot path"); everything else goes through
Channels' ProtocolTypeRouter: Django for pages, API and admin, consumers for
websockets. Lifespan events start and stop the proxy's shared resources.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "vcloud.settings.base")

from django.core.asgi import get_asgi_application  # noqa: E402

django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from proxy_app.asgi import handle as proxy_handle  # noqa: E402
from proxy_app.routes import is_proxy_path  # noqa: E402
from vcloud.lifespan import lifespan  # noqa: E402
from vcloud.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_http),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    kind = scope["type"]
    if kind == "http" and is_proxy_path(scope["path"]):
        await proxy_handle(scope, receive, send)
    elif kind == "lifespan":
        await lifespan(scope, receive, send)
    else:
        await router(scope, receive, send)
