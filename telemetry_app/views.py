"""The dashboard pages: overview, sessions, savings, telemetry. All behind login,
all scoped to the user's account."""

from __future__ import annotations

import csv

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from memory_app.services.jobs import jobs_enqueue
from telemetry_app import selectors as sel
from telemetry_app.charts import usage_chart
from telemetry_app.forms import (
    FORMAT_LABELS,
    DateRangeForm,
    SessionFilterForm,
    range_presets,
    sort_columns,
)
from vcloud.accounts.selectors import vckeys_for_account
from vcloud.accounts.services import account_for_user


@login_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    span = request.GET.get("chart", "24h")
    span = span if span in sel.CHART_SPANS else "24h"
    series = sel.usage_series(account=account, span=span)
    context = {
        "kpis": sel.overview_kpis(account=account),
        "requests": sel.requests_recent(account=account),
        "chart": usage_chart(series, hourly=sel.CHART_SPANS[span][1] == "hour"),
        "span": span,
        "spans": list(sel.CHART_SPANS),
        "format_labels": FORMAT_LABELS,
    }
    return render(request, "dashboard/overview.html", context)


@login_required
@require_GET
def sessions(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = SessionFilterForm(
        request.GET or None,
        keys=list(vckeys_for_account(account=account)),
        models=sel.models_for_account(account=account),
    )
    filters = form.filters()
    page = sel.sessions_page(account=account, filters=filters, page=request.GET.get("page"))
    context = {
        "form": form,
        "page": page,
        "columns": sort_columns(filters.sort),
        "filtered": bool(request.GET.keys() - {"page", "sort"}),
    }
    return render(request, "dashboard/sessions.html", context)


@login_required
@require_GET
def session_detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    account = account_for_user(request.user)
    params = sel.SessionParams.from_query(request.GET)
    detail = sel.session_detail(account=account, conversation_id=conversation_id, params=params)
    if detail is None:
        raise Http404("No such session")
    context = {"detail": detail, "conversation": detail.conversation, "requests": detail.requests}
    return render(request, "dashboard/session_detail.html", context)


@login_required
@require_POST
def session_compact(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The "Compact now" button: queue the conversation's memory job (tagging,
    compaction where the window is over its threshold, tag summaries)."""
    account = account_for_user(request.user)
    conversation = sel.conversation_for_account(account=account, conversation_id=conversation_id)
    if conversation is None:
        raise Http404("No such session")
    if jobs_enqueue(conversation_ids=[conversation.pk]):
        messages.success(request, "Memory job queued: its progress shows below.")
    else:
        messages.info(request, "A memory job is already waiting to run for this session.")
    return redirect(reverse("session_detail", args=[conversation.pk]) + "#memory-jobs")


@login_required
@require_GET
def savings(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = DateRangeForm(request.GET or None)
    dates = form.date_range(today=sel.today_utc())
    as_csv = request.GET.get("format") == "csv"
    report = sel.savings_report(
        account=account, dates=dates, session_page=request.GET.get("spage"), all_sessions=as_csv
    )
    if as_csv:
        return _csv(report, f"vcloud-savings-{dates.start}-{dates.end}.csv")
    context = {"form": form, "report": report, "presets": range_presets(today=sel.today_utc())}
    return render(request, "dashboard/savings.html", context)


def _csv(report: sel.SavingsReport, filename: str) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv.writer(response).writerows(sel.savings_csv_rows(report))
    return response


@login_required
@require_GET
def telemetry(request: HttpRequest) -> HttpResponse:
    account = account_for_user(request.user)
    form = DateRangeForm(request.GET or None)
    dates = form.date_range(today=sel.today_utc())
    context = {
        "form": form,
        "dates": dates,
        "components": sel.components_ledger(account=account, dates=dates),
        "calls": sel.llm_calls_page(account=account, dates=dates, page=request.GET.get("page")),
        "sample": sel.LATENCY_SAMPLE,
        "presets": range_presets(today=sel.today_utc()),
    }
    return render(request, "dashboard/telemetry.html", context)
