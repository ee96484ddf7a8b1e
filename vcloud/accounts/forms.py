from __future__ import annotations

import secrets

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

from vcloud.accounts.models import Account


class SignUpForm(UserCreationForm):
    email = forms.EmailField(required=True, help_text="For account notices only.")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip().lower()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this email already exists.")
        return email


class KeyCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        initial="default",
        help_text="A label, e.g. the app or machine that uses the key.",
    )
    # One per rendered form, so a reload that re-posts it creates no second key.
    nonce = forms.CharField(max_length=64, widget=forms.HiddenInput, required=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["nonce"].initial = secrets.token_hex(16)


def _upstream_field(provider: str) -> forms.URLField:
    return forms.URLField(
        required=False,
        assume_scheme="https",
        label=f"{provider} upstream",
        help_text=f"Base URL for {provider}-format requests; empty uses the server default.",
    )


class AccountSettingsForm(forms.ModelForm):
    upstream_anthropic = _upstream_field("Anthropic")
    upstream_openai = _upstream_field("OpenAI")
    upstream_gemini = _upstream_field("Gemini")

    class Meta:
        model = Account
        fields = (
            "context_ceiling",
            "cache_aware_layout",
            "capture_payloads",
            "upstream_anthropic",
            "upstream_openai",
            "upstream_gemini",
        )

    def clean_context_ceiling(self) -> int:
        value = self.cleaned_data["context_ceiling"]
        if value < 1000:
            raise forms.ValidationError("The ceiling must be at least 1,000 tokens.")
        return value
