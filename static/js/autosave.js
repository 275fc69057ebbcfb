// Draft autosave that survives a web restart or a network blip. An autosave is any htmx
// request whose target is #autosave-status (practice answers, mock answers, follow-ups,
// arithmetic steps). When one does not reach the server (connection refused while the web
// process restarts) or gets a 5xx / 429, the status line says the text is NOT saved yet and
// the save is sent again (1 s, 2 s, 4 s, then every 5 s) until the server takes it,
// so a reload after the outage finds what was typed during it.
(() => {
  const RETRYABLE = (status) => status === 0 || status === 429 || status >= 500;
  const timers = new Map(); // element -> { timer, attempt }
  window.autosave = { unsaved: () => timers.size }; // read by the fault tests

  const isAutosave = (elt) => elt && elt.getAttribute && elt.getAttribute("hx-target") === "#autosave-status";
  const showUnsaved = (attempt) => {
    const box = document.getElementById("autosave-status");
    if (!box) return;
    const span = document.createElement("span");
    span.className = "unsaved";
    span.textContent = "Not saved yet: the server did not answer. Your text is still here; "
      + `retrying${attempt > 1 ? ` (attempt ${attempt})` : ""}…`;
    box.replaceChildren(span);
  };
  const retryLater = (elt) => {
    const previous = timers.get(elt);
    if (previous) clearTimeout(previous.timer);
    const attempt = previous ? previous.attempt + 1 : 1;
    showUnsaved(attempt);
    const delay = Math.min(5000, 1000 * 2 ** (attempt - 1));
    const timer = setTimeout(() => {
      if (!elt.isConnected) { timers.delete(elt); return; }
      // The same request again, with the box's current text (the form's values + hx-vals).
      htmx.ajax("POST", elt.getAttribute("hx-post"), {
        source: elt, target: "#autosave-status", swap: "innerHTML",
      }).catch(() => {}); // a failure arrives as htmx:sendError / responseError below
    }, delay);
    timers.set(elt, { timer, attempt });
  };

  document.addEventListener("htmx:sendError", (ev) => {
    if (isAutosave(ev.detail.elt)) retryLater(ev.detail.elt);
  });
  document.addEventListener("htmx:responseError", (ev) => {
    if (isAutosave(ev.detail.elt) && RETRYABLE(ev.detail.xhr.status)) retryLater(ev.detail.elt);
  });
  document.addEventListener("htmx:afterRequest", (ev) => {
    const elt = ev.detail.elt;
    if (ev.detail.successful && timers.has(elt)) {
      clearTimeout(timers.get(elt).timer);
      timers.delete(elt);
    }
  });
})();
