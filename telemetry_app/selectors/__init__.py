"""Account-scoped reads behind the dashboard pages.

Reports (KPIs, chart, savings, the per-component ledger) read the rollups that
``telemetry_app.rollups`` keeps, never the ledger in full; lists page through
indexed rows with their relations joined, never a query per row. Days and
hours are UTC. One module per page; everything is importable from here.
"""

from __future__ import annotations

from telemetry_app.selectors.common import PROXY, DateRange, Savings, today_utc
from telemetry_app.selectors.context_window import ContextView, payload_redact
from telemetry_app.selectors.ledger import (
    LATENCY_SAMPLE,
    ComponentStats,
    components_ledger,
    llm_calls_page,
)
from telemetry_app.selectors.overview import (
    CHART_SPANS,
    Kpi,
    overview_kpis,
    requests_recent,
    usage_series,
)
from telemetry_app.selectors.savings import (
    OWN_CALLS_LABEL,
    SavingsReport,
    savings_csv_rows,
    savings_report,
)
from telemetry_app.selectors.session import SessionDetail, SessionParams, session_detail
from telemetry_app.selectors.sessions import (
    SESSION_SORTS,
    SessionFilters,
    conversation_for_account,
    conversations_filtered,
    models_for_account,
    pending_jobs_by_conversation,
    requests_for_conversation,
    sessions_page,
)

__all__ = [
    "CHART_SPANS",
    "LATENCY_SAMPLE",
    "OWN_CALLS_LABEL",
    "PROXY",
    "SESSION_SORTS",
    "ComponentStats",
    "ContextView",
    "DateRange",
    "Kpi",
    "Savings",
    "SavingsReport",
    "SessionDetail",
    "SessionFilters",
    "SessionParams",
    "components_ledger",
    "conversation_for_account",
    "conversations_filtered",
    "llm_calls_page",
    "models_for_account",
    "overview_kpis",
    "payload_redact",
    "pending_jobs_by_conversation",
    "requests_for_conversation",
    "requests_recent",
    "savings_csv_rows",
    "savings_report",
    "session_detail",
    "sessions_page",
    "today_utc",
    "usage_series",
]
