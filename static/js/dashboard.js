// Live updates of the dashboard pages over one websocket per page (/ws/live/).
// The server subscribes the socket to the logged-in account's events only:
//   request.started / request.done  (payload: proxy_app.writer.record_event)
// Overview: rows appear at the top of #live-grid and the KPI counters grow.
// Sessions: the counters of listed sessions grow; other activity shows a notice.
// After a drop the socket reconnects with exponential backoff (1 s … 30 s).
(() => {
  "use strict";
  const grid = document.querySelector("#live-grid");
  const sessions = document.querySelector("#session-list");
  if (!grid && !sessions) return;

  const MAX_ROWS = 50;
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const numbers = new Intl.NumberFormat("en-US");
  const labels = readJson("format-labels");

  function readJson(id) {
    const element = document.getElementById(id);
    try { return element ? JSON.parse(element.textContent) : {}; } catch { return {}; }
  }

  const pad = (n) => String(n).padStart(2, "0");
  const count = (n) => numbers.format(n || 0);
  function ms(value) {
    if (value === null || value === undefined) return "—";
    return value >= 100 ? `${numbers.format(Math.round(value))} ms` : `${value.toFixed(1)} ms`;
  }
  function usd(value) {  // the same rule as the server's |usd filter
    const amount = Number(value || 0);
    const abs = Math.abs(amount);
    let text;
    if (abs >= 100) text = numbers.format(Math.round(abs));
    else if (abs >= 1 || abs === 0) text = abs.toFixed(2);
    else if (abs >= 0.0001) text = abs.toFixed(4);
    else text = abs.toFixed(6);
    return `${amount < 0 ? "−" : ""}$${text}`;
  }
  function stamp(iso) {  // UTC, as the server renders it
    const d = new Date(iso);
    const time = element("time", `${MONTHS[d.getUTCMonth()]} ${pad(d.getUTCDate())} ` +
      `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`);
    time.dateTime = iso;
    return time;
  }

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }
  function cell(content, className) {
    const td = element("td", undefined, className);
    td.append(content instanceof Node ? content : String(content));
    return td;
  }
  function flash(row) {
    row.classList.remove("fresh");
    void row.offsetWidth;  // restart the animation
    row.classList.add("fresh");
  }

  // ------------------------------------------------------------- overview grid
  function sessionLink(conversationId) {
    if (conversationId === null || conversationId === undefined) return element("span", "—", "muted");
    const known = grid.querySelector(`a[data-conversation-id="${conversationId}"]`);
    const link = element("a", known ? known.textContent : `conversation ${conversationId}`);
    link.href = grid.dataset.sessionUrl.replace(/0\/$/, `${conversationId}/`);
    link.dataset.conversationId = conversationId;
    return link;
  }
  function statusBadge(event, done) {
    if (!done) return element("span", "…", "status pending");
    const failed = !event.status || event.status >= 400;
    const badge = element("span", event.status || "—", `status ${failed ? "err" : "ok"}`);
    if (event.error) badge.title = event.error;
    return badge;
  }
  function fillRow(row, event) {
    const done = event.type === "request.done";
    row.replaceChildren(
      cell(stamp(event.created_at)),
      cell(sessionLink(event.conversation_id)),
      cell(labels[event.format] || event.format || "—"),
      cell(event.model || "—"),
      cell(event.stream ? "yes" : "no"),
      cell(statusBadge(event, done)),
      cell(done ? `${count(event.client_tokens)} → ${count(event.upstream_tokens)}` : "…", "num"),
      cell(done ? ms(event.overhead_ms) : "…", "num"),
      cell(done ? ms(event.upstream_ms) : "…", "num"),
      cell(done ? usd(event.cost) : "…", "num"),
    );
  }
  function compact(value) {  // the same rule as the server's |compact filter
    for (const [limit, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
      if (Math.abs(value) >= limit) return `${Number((value / limit).toPrecision(3))}${suffix}`;
    }
    return String(Number(value.toPrecision(3)));
  }
  function addTo(node, amount) {
    const value = Number(node.dataset.value || 0) + Number(amount || 0);
    node.dataset.value = value;
    node.textContent = node.dataset.format === "compact" ? compact(value) : count(value);
    if (node.dataset.format === "compact") node.title = `${count(value)} tokens`;
  }
  function onGridEvent(event) {
    const body = grid.tBodies[0];
    body.querySelector("tr.empty")?.remove();
    let row = body.querySelector(`tr[data-request-id="${CSS.escape(event.request_id)}"]`);
    if (row && event.type === "request.started") return;  // already shown
    const fresh = !row;
    if (fresh) {
      row = document.createElement("tr");
      row.dataset.requestId = event.request_id;
      body.prepend(row);
    }
    fillRow(row, event);
    if (fresh) flash(row);
    while (body.rows.length > MAX_ROWS) body.deleteRow(-1);
    if (event.type === "request.done") {
      document.querySelectorAll("[data-live-add]").forEach((node) => {
        addTo(node, node.dataset.liveAdd === "requests" ? 1 : event[node.dataset.liveAdd]);
      });
    }
  }

  // ------------------------------------------------------------- sessions list
  function onSessionEvent(event) {
    if (event.type !== "request.done" || event.conversation_id === null) return;
    const row = sessions.querySelector(`tr[data-conversation-id="${event.conversation_id}"]`);
    if (!row) {
      const notice = document.getElementById("sessions-new");
      if (notice) notice.hidden = false;
      return;
    }
    addTo(row.querySelector('[data-field="requests"]'), 1);
    addTo(row.querySelector('[data-field="client_tokens"]'), event.client_tokens);
    addTo(row.querySelector('[data-field="upstream_tokens"]'), event.upstream_tokens);
    const updated = row.querySelector('[data-field="updated"]');
    if (updated) updated.textContent = "just now";
    flash(row);
  }

  // ------------------------------------------------------------------- socket
  function handle(event) {
    if (!event || !event.type || !event.request_id) return;
    if (grid) onGridEvent(event);
    if (sessions) onSessionEvent(event);
  }
  window.vcLive(handle);
})();
