// Small progressive enhancements: copy buttons and confirm-before-submit.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  const text = source.innerText;
  const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done);
  } else {
    const area = document.createElement("textarea");
    area.value = text; document.body.appendChild(area); area.select();
    document.execCommand("copy"); area.remove(); done();
  }
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// The account's live events (request.started / request.done) over one
// websocket per page, reconnecting with jittered backoff; the page's
// #live-status element shows the state. onEvent gets each parsed event.
window.vcLive = function vcLive(onEvent) {
  const BACKOFF_MAX_MS = 30000;
  const status = document.querySelector("#live-status");
  let attempt = 0;
  function setStatus(state, text) {
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
  }
  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${window.location.host}/ws/live/`);
    setStatus("connecting", "connecting…");
    socket.addEventListener("open", () => {
      attempt = 0;
      setStatus("live", "live");
    });
    socket.addEventListener("message", (message) => {
      try { onEvent(JSON.parse(message.data)); } catch (error) { console.error(error); }
    });
    socket.addEventListener("close", (closed) => {
      if (closed.code === 4401) {
        setStatus("off", "not logged in: reload the page");
        return;
      }
      const delay = Math.min(BACKOFF_MAX_MS, 1000 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt += 1;
      setStatus("reconnecting", `reconnecting in ${Math.ceil(delay / 1000)} s…`);
      setTimeout(connect, delay);
    });
  }
  connect();
};
