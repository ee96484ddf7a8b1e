// The session page (/dashboard/sessions/<id>/), enhanced in place:
// - Quote search: POST /api/v1/conversations/<id>/search {query, limit} with the
//   browser session and its CSRF token; hits (or the API's error) render below.
// - Background work: while memory jobs are pending, GET /api/v1/conversations/<id>
//   every second (pending_jobs, jobs, counts) updates the jobs table, the progress
//   bar and the counters; when it reaches 0 a notice offers a reload.
// - Live: one websocket (/ws/live/, the account's events only). request.done of this
//   conversation prepends a row to the requests (first page only), grows the
//   counters and watches the memory job it starts. Reconnects with backoff.
(() => {
  "use strict";
  const root = document.getElementById("session-page");
  if (!root) return;

  const conversationId = Number(root.dataset.conversationId);
  const csrf = root.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
  const numbers = new Intl.NumberFormat("en-US");
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const MAX_REQUEST_ROWS = 25;
  const POLL_MS = 1000;
  const GRACE_MS = 4000;  // after a live request, watch for the job it enqueues

  // ------------------------------------------------------------------ helpers
  const pad = (n) => String(n).padStart(2, "0");
  const count = (n) => numbers.format(n || 0);
  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }
  function cell(content, className) {
    const td = element("td", undefined, className);
    td.append(content instanceof Node ? content : String(content));
    return td;
  }
  function stamp(iso) {  // UTC, as the server renders it
    const d = new Date(iso);
    const time = element("time", `${MONTHS[d.getUTCMonth()]} ${pad(d.getUTCDate())} ` +
      `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`);
    time.dateTime = iso;
    return time;
  }
  function compact(value) {  // the server's |compact filter
    for (const [limit, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
      if (Math.abs(value) >= limit) return `${Number((value / limit).toPrecision(3))}${suffix}`;
    }
    return String(Number(Number(value).toPrecision(3)));
  }
  function ms(value) {
    if (value === null || value === undefined) return "—";
    return value >= 100 ? `${numbers.format(Math.round(value))} ms` : `${value.toFixed(1)} ms`;
  }
  function usd(value) {  // the server's |usd filter
    const amount = Number(value || 0);
    const abs = Math.abs(amount);
    let text;
    if (abs >= 100) text = numbers.format(Math.round(abs));
    else if (abs >= 1 || abs === 0) text = abs.toFixed(2);
    else if (abs >= 0.0001) text = abs.toFixed(4);
    else text = abs.toFixed(6);
    return `${amount < 0 ? "−" : ""}$${text}`;
  }
  function pageUrl(params, hash) {  // this page's URL with some query parameters changed
    const url = new URL(window.location.href);
    for (const [key, value] of Object.entries(params)) {
      if (value === null) url.searchParams.delete(key);
      else url.searchParams.set(key, value);
    }
    url.hash = hash;
    return url.pathname + url.search + url.hash;
  }
  function flash(row) {
    row.classList.remove("fresh");
    void row.offsetWidth;  // restart the animation
    row.classList.add("fresh");
  }

  // ----------------------------------------------------------------- counters
  function counter(name) { return root.querySelector(`[data-counter="${name}"]`); }
  function setCounter(name, value) {
    if (value === undefined || value === null) return;
    root.querySelectorAll(`[data-counter="${name}"]`).forEach((node) => {
      node.dataset.value = value;
      if (node.dataset.format === "compact") {
        node.textContent = compact(Number(value));
        node.title = `${count(value)} tokens`;
      } else {
        node.textContent = typeof value === "number" ? count(value) : value;
      }
    });
  }
  function addToCounter(name, amount) {
    const node = counter(name);
    if (node) setCounter(name, Number(node.dataset.value || 0) + Number(amount || 0));
  }

  // ------------------------------------------------------------- quote search
  const searchForm = document.getElementById("quote-form");
  const searchInput = document.getElementById("quote-query");
  const searchError = document.getElementById("quote-error");
  const searchStatus = document.getElementById("quote-status");
  const hitList = document.getElementById("quote-hits");

  function searchProblem(status, body) {
    const detail = body && body.detail;
    if (status === 422) {
      const items = Array.isArray(detail) ? detail : [];
      if (items.some((e) => e.type === "string_too_short")) {
        return "Type a word or phrase to search for: the search needs at least one character.";
      }
      const said = items.map((e) => e.msg).filter(Boolean).join("; ");
      return `The search was not accepted (422${said ? `: ${said}` : ""}).`;
    }
    if (status === 403) return "The server refused the search (403): your session may have expired. Reload the page and try again.";
    if (status === 401) return "You are logged out (401): log in again to search.";
    if (status === 404) return "This session no longer exists (404).";
    const text = typeof detail === "string" ? `: ${detail}` : "";
    return `The search failed (${status}${text}). Try again in a moment.`;
  }
  function showSearchError(message) {
    searchError.textContent = message;
    searchError.hidden = !message;
  }
  function hitItem(hit) {
    const item = element("li", undefined, "hit");
    const meta = element("div", undefined, "hit-meta");
    const link = element("a", `#${hit.position}`);
    link.href = pageUrl({ at: hit.position, turns: null }, `turn-${hit.position}`);
    meta.append(link, element("span", hit.role, `role ${hit.role}`),
      element("span", hit.session_date || "no date"),
      element("span", `score ${Number(hit.score).toFixed(4)}`));
    item.append(meta, element("p", hit.excerpt, "excerpt"));
    return item;
  }
  async function search(event) {
    event.preventDefault();
    showSearchError("");
    hitList.replaceChildren();
    searchStatus.textContent = "Searching…";
    let response;
    try {
      response = await fetch(root.dataset.searchUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify({ query: searchInput.value.trim(), limit: 10 }),
      });
    } catch {
      searchStatus.textContent = "";
      showSearchError("The search could not reach the server. Check the connection and try again.");
      return;
    }
    const body = await response.json().catch(() => null);
    searchStatus.textContent = "";
    if (!response.ok) {
      showSearchError(searchProblem(response.status, body));
      return;
    }
    const hits = Array.isArray(body) ? body : [];
    searchStatus.textContent = hits.length
      ? `${hits.length} turn${hits.length === 1 ? "" : "s"}, best first.`
      : "No stored turn matches.";
    hitList.replaceChildren(...hits.map(hitItem));
  }
  searchForm?.addEventListener("submit", search);

  // ------------------------------------------------------- background work
  const progressBox = document.getElementById("job-progress");
  const progressBar = document.getElementById("job-progress-bar");
  const progressLabel = document.getElementById("job-progress-label");
  const finishedNotice = document.getElementById("jobs-finished");
  const jobsTable = document.getElementById("session-jobs");
  const JOBS_SHOWN = jobsTable ? Math.max(jobsTable.tBodies[0].rows.length, 5) : 5;
  let pending = Number(root.dataset.pending || 0);
  let sawPending = pending > 0;
  let pollTimer = null;
  let watchUntil = 0;
  let failures = 0;  // consecutive failed polls; give up after MAX_FAILURES
  const MAX_FAILURES = 10;

  function jobRow(job) {
    const row = element("tr");
    row.dataset.jobId = job.id;
    const state = { done: "ok", failed: "err" }[job.state] || "pending";
    const finished = job.finished_at ? stamp(job.finished_at) : element("span", "—", "muted");
    const error = element("td", undefined, "error-cell");
    if (job.error) error.append(element("span", job.error.slice(0, 160), "negative"));
    row.append(
      cell(job.kind),
      cell(element("span", job.state, `status ${state}`)),
      cell(job.total ? `${count(job.progress)} / ${count(job.total)}` : "—", "num"),
      cell(stamp(job.created_at)),
      cell(finished),
      error,
    );
    return row;
  }
  function showProgress(jobs) {
    const active = jobs.find((j) => j.state === "running") || jobs.find((j) => j.state === "pending");
    progressBox.hidden = !active;
    if (!active) return;
    if (active.total) {
      progressBar.max = active.total;
      progressBar.value = active.progress;
      progressLabel.textContent = `${active.kind}: ${count(active.progress)} of ${count(active.total)}`;
    } else {
      progressBar.removeAttribute("value");  // indeterminate
      progressLabel.textContent = `${active.kind}: ${active.state}…`;
    }
  }
  function applyDetail(detail) {
    for (const name of ["turns", "watermark", "segments", "tag_summaries", "facts",
      "client_tokens", "upstream_tokens", "pending_jobs"]) {
      setCounter(name, detail[name]);
    }
    setCounter("requests", detail.request_count);
    setCounter("pending_label", detail.pending_jobs ? "memory jobs queued or running" : "all background work done");
    const jobs = detail.jobs || [];
    if (jobsTable && jobs.length) jobsTable.tBodies[0].replaceChildren(...jobs.slice(0, JOBS_SHOWN).map(jobRow));
    showProgress(jobs);
  }
  const MEMORY = ["segments", "tag_summaries", "watermark"];
  // What the tables below show (the counters change as the API is polled).
  const shownMemory = Object.fromEntries(MEMORY.map((name) => [name, Number(counter(name)?.dataset.value || 0)]));
  function finished(detail) {
    if (!sawPending || !finishedNotice) return;
    const failed = (detail.jobs || []).some((j) => j.state === "failed");
    const changed = MEMORY.some((name) => Number(detail[name]) !== shownMemory[name]);
    let text = "Background work finished: no new segments or tag summaries.";
    if (failed) text = "Background work ended with an error (see the table).";
    else if (changed) {
      text = `Background work finished: ${count(detail.segments)} segments, ` +
        `${count(detail.tag_summaries)} tag summaries, watermark ${count(detail.watermark)}.`;
    }
    document.getElementById("jobs-finished-text").textContent = text;
    document.getElementById("jobs-reload").hidden = !changed;
    finishedNotice.lastChild.textContent = changed ? " to see them in the tables below." : "";
    finishedNotice.hidden = false;
  }
  async function poll() {
    pollTimer = null;
    let detail = null;
    try {
      const response = await fetch(root.dataset.apiUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) detail = await response.json();
    } catch { /* try again on the next tick */ }
    if (detail) {
      failures = 0;
      applyDetail(detail);
      pending = detail.pending_jobs;
      if (pending > 0) sawPending = true;
    } else if (++failures >= MAX_FAILURES) {
      return;  // the server keeps refusing: stop asking (a reload starts again)
    }
    if (pending > 0 || !detail || Date.now() < watchUntil) {
      pollTimer = setTimeout(poll, POLL_MS);
    } else {
      finished(detail);
    }
  }
  function watchJobs(graceMs) {
    watchUntil = Math.max(watchUntil, Date.now() + graceMs);
    if (pollTimer === null) pollTimer = setTimeout(poll, graceMs ? 300 : 0);
  }
  document.getElementById("jobs-reload")?.addEventListener("click", (event) => {
    event.preventDefault();
    window.location.reload();
  });
  if (pending > 0) watchJobs(0);

  // ------------------------------------------------------------ live requests
  const requests = document.getElementById("session-requests");
  const liveRows = root.dataset.liveRequests === "on";

  function fillRow(row, event) {
    const done = event.type === "request.done";
    let badge;
    if (!done) badge = element("span", "…", "status pending");
    else {
      const failed = !event.status || event.status >= 400;
      badge = element("span", event.status || "—", `status ${failed ? "err" : "ok"}`);
      if (event.error) badge.title = event.error;
    }
    const window_ = element("td");
    const link = element("a", "Window", "window-link");
    link.href = pageUrl({ request: event.request_id }, "context-viewer");
    window_.append(link);
    row.replaceChildren(
      cell(stamp(event.created_at)),
      cell(event.model || "—"),
      cell(event.stream ? "yes" : "no"),
      cell(badge),
      cell(done ? `${count(event.client_tokens)} → ${count(event.upstream_tokens)}` : "…", "num"),
      cell(done ? count(event.cached_tokens || 0) : "…", "num"),
      cell(done ? ms(event.overhead_ms) : "…", "num"),
      cell(done ? ms(event.upstream_ms) : "…", "num"),
      cell(done ? usd(event.cost) : "…", "num"),
      window_,
    );
  }
  function onRequest(event) {
    if (event.conversation_id !== conversationId) return;
    if (requests && liveRows) {
      const body = requests.tBodies[0];
      let row = body.querySelector(`tr[data-request-id="${CSS.escape(event.request_id)}"]`);
      if (row && event.type === "request.started") return;
      const fresh = !row;
      if (fresh) {
        body.querySelector("tr.empty")?.remove();
        row = element("tr");
        row.dataset.requestId = event.request_id;
        body.prepend(row);
      }
      fillRow(row, event);
      if (fresh) flash(row);
      while (body.rows.length > MAX_REQUEST_ROWS) body.deleteRow(-1);
    }
    if (event.type !== "request.done") return;
    addToCounter("requests", 1);
    addToCounter("client_tokens", event.client_tokens);
    addToCounter("upstream_tokens", event.upstream_tokens);
    const updated = counter("updated");
    if (updated) updated.textContent = "just now";
    watchJobs(GRACE_MS);
  }

  window.vcLive((event) => {
    if (event && event.type && event.request_id) onRequest(event);
  });
})();
