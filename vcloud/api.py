"""The JSON API at /api/v1/ (django-ninja); OpenAPI docs at /api/v1/docs.

Auth: a vckey (``Authorization: Bearer <vckey>`` or ``X-VC-Key``) or the
browser session. Every operation receives ``request.auth`` = the caller's
Account and queries only through it. Errors are JSON: ``{"detail": "…"}``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.security import APIKeyHeader, HttpBearer, SessionAuth

from memory_app.api import router as memory_router
from memory_app.errors import ConversationNotFound, RequestContextNotFound
from vcloud.accounts.models import Account
from vcloud.accounts.selectors import vckey_resolve
from vcloud.accounts.services import account_for_user


class BearerKey(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Account | None:
        key = vckey_resolve(token)
        return key.account if key else None


class HeaderKey(APIKeyHeader):
    param_name = "X-VC-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> Account | None:
        found = vckey_resolve(key or "")
        return found.account if found else None


class SessionAccount(SessionAuth):
    """The browser session (CSRF-checked on unsafe methods, as ninja does)."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Account | None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return account_for_user(user)
        return None


api = NinjaAPI(
    title="vcloud API",
    version="1",
    urls_namespace="api-v1",
    auth=[BearerKey(), HeaderKey(), SessionAccount()],
    docs_url="/docs",
)
api.add_router("/conversations", memory_router)


@api.exception_handler(ConversationNotFound)
def conversation_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": "conversation not found"}, status=404)


@api.exception_handler(RequestContextNotFound)
def request_context_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    detail = "no context record for this request (it was forwarded as sent, under its ceiling)"
    return api.create_response(request, {"detail": detail}, status=404)
