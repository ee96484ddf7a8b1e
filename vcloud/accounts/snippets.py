"""The base_url lines a user pastes into each official SDK (CONTRACT.md)."""

from __future__ import annotations

from django.http import HttpRequest


def proxy_origin(request: HttpRequest) -> str:
    return f"{request.scheme}://{request.get_host()}"


def sdk_snippets(request: HttpRequest, key: str) -> list[dict[str, str]]:
    if not key:
        return []
    base = f"{proxy_origin(request)}/v/{key}"
    return [
        {
            "sdk": "Anthropic",
            "code": f'import anthropic\n\nclient = anthropic.Anthropic(base_url="{base}")',
        },
        {
            "sdk": "OpenAI",
            "code": f'import openai\n\nclient = openai.OpenAI(base_url="{base}/v1")',
        },
        {
            "sdk": "google-genai",
            "code": (
                "from google import genai\n\n"
                f'client = genai.Client(http_options={{"base_url": "{base}"}})'
            ),
        },
    ]
