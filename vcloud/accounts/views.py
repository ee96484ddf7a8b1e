from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from memory_app.config import config_for, config_to_yaml
from vcloud.accounts.forms import (
    AccountSettingsForm,
    KeyCreateForm,
    MemoryImportForm,
    MemorySettingsForm,
    SignUpForm,
    stored_memory_problem,
)
from vcloud.accounts.models import Account, VCKey
from vcloud.accounts.selectors import vckey_get, vckeys_for_account
from vcloud.accounts.services import (
    account_for_user,
    account_memory_settings_update,
    account_settings_update,
    vckey_create,
    vckey_revoke,
)
from vcloud.accounts.snippets import sdk_snippets


def landing(request: HttpRequest) -> HttpResponse:
    return render(request, "landing.html")


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("keys")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        account_for_user(user)
        login(request, user)
        messages.success(request, "Welcome to vcloud. Create a key to get started.")
        return redirect("keys")
    return render(request, "accounts/signup.html", {"form": form})


@login_required
def keys(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = KeyCreateForm(request.POST or None)
    created: tuple[VCKey, str] | None = None
    if request.method == "POST" and form.is_valid():
        if _nonce_seen(request, form.cleaned_data["nonce"]):
            messages.info(request, "That key was already created; its value is shown only once.")
            return redirect("keys")
        created = vckey_create(account=account, name=form.cleaned_data["name"])
        form = KeyCreateForm()
    key_list = list(vckeys_for_account(account=account))
    selected = _selected_key(request, key_list, created)
    raw = created[1] if created else None
    context = {
        "form": form,
        "keys": key_list,
        "selected": selected,
        "raw_key": raw,
        "snippets": sdk_snippets(request, raw or (f"{selected.prefix}…" if selected else "")),
    }
    return render(request, "accounts/keys.html", context, status=201 if created else 200)


def _nonce_seen(request: HttpRequest, nonce: str) -> bool:
    if not nonce:
        return False
    seen: list[str] = request.session.get("key_nonces", [])
    if nonce in seen:
        return True
    request.session["key_nonces"] = [*seen[-19:], nonce]
    return False


def _selected_key(
    request: HttpRequest, key_list: list[VCKey], created: tuple[VCKey, str] | None
) -> VCKey | None:
    if created:
        return created[0]
    wanted = request.GET.get("key", "")
    by_id = {str(k.pk): k for k in key_list}
    if wanted in by_id:
        return by_id[wanted]
    return next((k for k in key_list if k.is_active), None)


@login_required
@require_POST
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    key = vckey_get(account=account_for_user(request.user), key_id=key_id)
    if key is None:
        raise Http404("No such key")
    vckey_revoke(key=key)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("keys")


@login_required
def account_settings(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = AccountSettingsForm(request.POST or None, instance=account)
    if request.method == "POST" and form.is_valid():
        account_settings_update(form=form)
        messages.success(request, "Settings saved.")
        return redirect("settings")
    return render(request, "accounts/settings.html", {"form": form})


@login_required
def memory_settings(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    if request.method != "POST":
        return _memory_page(request, account)
    form = MemorySettingsForm(request.POST)
    if request.POST.get("action") == "preset":
        loaded = form.preset_loaded()
        if not loaded.is_bound:
            preset = loaded.initial["preset"]
            messages.info(request, f"Loaded the {preset} preset. Review the values, then save.")
        return _memory_page(request, account, form=loaded)
    if form.is_valid() and form.config is not None:
        account_memory_settings_update(account=account, config=form.config)
        messages.success(request, "Memory settings saved.")
        return redirect("memory_settings")
    return _memory_page(request, account, form=form)


@login_required
@require_POST
def memory_settings_import(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = MemoryImportForm(request.POST, request.FILES)
    if form.is_valid() and form.config is not None:
        account_memory_settings_update(account=account, config=form.config)
        messages.success(request, "Memory settings imported.")
        return redirect("memory_settings")
    return _memory_page(request, account, import_form=form)


@login_required
@require_GET
def memory_settings_export(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    response = HttpResponse(
        config_to_yaml(config_for(account.memory_settings)),
        content_type="application/yaml; charset=utf-8",
    )
    filename = f"vcloud-memory-{slugify(account.name) or 'settings'}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _memory_page(
    request: HttpRequest,
    account: Account,
    *,
    form: MemorySettingsForm | None = None,
    import_form: MemoryImportForm | None = None,
) -> HttpResponse:
    context = {
        "form": form or MemorySettingsForm.for_config(config_for(account.memory_settings)),
        "import_form": import_form or MemoryImportForm(),
        "stored_problem": stored_memory_problem(account.memory_settings),
    }
    return render(request, "accounts/memory_settings.html", context)
