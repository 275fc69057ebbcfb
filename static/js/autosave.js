// Draft autosave that survives a web restart, a network blip or a rate limit. An autosave
// is any htmx request whose target is #autosave-status (practice answers, mock answers,
// follow-ups, arithmetic steps). When one does not reach the server (connection refused
// while the web process restarts) or gets a 5xx, the status line says the text is NOT saved
// yet and the save is sent again (1 s, 2 s, 4 s, then every 5 s) until the server takes it,
// so a reload after the outage finds what was typed during it. A 429 (more than 10 saves a
// second: a script, not typing) shows the server's reason and is sent again after its
// Retry-After. A 400/413 (input no box can hold) shows the server's reason and is not
// retried: the same text would be refused again; the text stays in the box.
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
  const showRefusal = (xhr) => {
    const box = document.getElementById("autosave-status");
    if (!box) return;
    const span = document.createElement("span");
    span.className = "unsaved";
    // The server's message, as text (never markup).
    const text = new DOMParser().parseFromString(xhr.responseText || "", "text/html").body.textContent;
    span.textContent = (text || "").trim() || `Not saved (the server answered ${xhr.status}).`;
    box.replaceChildren(span);
  };
  const retryAfterMs = (xhr) => {
    const s = Number(xhr.getResponseHeader("Retry-After"));
    return Number.isFinite(s) && s > 0 ? s * 1000 : 1000;
  };
  // minDelay: a 429's Retry-After (its message is already shown); else the status says so.
  const retryLater = (elt, minDelay = 0) => {
    const previous = timers.get(elt);
    if (previous) clearTimeout(previous.timer);
    const attempt = previous ? previous.attempt + 1 : 1;
    if (!minDelay) showUnsaved(attempt);
    const delay = Math.max(minDelay, Math.min(5000, 1000 * 2 ** (attempt - 1)));
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
    if (!isAutosave(ev.detail.elt)) return;
    const xhr = ev.detail.xhr;
    if (xhr.status === 429) retryLater(ev.detail.elt, retryAfterMs(xhr));
    else if (RETRYABLE(xhr.status)) retryLater(ev.detail.elt);
    else {
      const previous = timers.get(ev.detail.elt); // refused for good: no retry pending
      if (previous) { clearTimeout(previous.timer); timers.delete(ev.detail.elt); }
      showRefusal(xhr);
    }
  });
  document.addEventListener("htmx:afterRequest", (ev) => {
    const elt = ev.detail.elt;
    const xhr = ev.detail.xhr;
    // htmx-config swaps a 429 in (its message shows) as a success: send it again later.
    if (isAutosave(elt) && xhr && xhr.status === 429) {
      retryLater(elt, retryAfterMs(xhr));
      return;
    }
    if (ev.detail.successful && timers.has(elt)) {
      clearTimeout(timers.get(elt).timer);
      timers.delete(elt);
    }
    if (isAutosave(elt) && ev.detail.successful && xhr && xhr.status < 300) {
      const sent = dirty.get(elt);
      if (sent !== undefined && sent === valueOf(elt)) dirty.delete(elt);
    }
  });

  // Leaving the page (reload, link, tab closed) inside the autosave's typing delay: the last
  // keystrokes are sent with a keepalive request, which the browser completes after the
  // page is gone, so a reload right after typing finds them.
  const dirty = new Map(); // element -> its text when it last changed
  const valueOf = (elt) => (elt.tagName === "FORM" ? new URLSearchParams(new FormData(elt)).toString() : elt.value);
  document.addEventListener("input", (ev) => {
    const elt = ev.target.closest && ev.target.closest("[hx-target='#autosave-status']");
    if (elt) dirty.set(elt, valueOf(elt));
  });
  window.addEventListener("pagehide", () => {
    const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
    for (const elt of dirty.keys()) {
      if (!elt.isConnected) continue;
      const body = elt.tagName === "FORM" ? new FormData(elt) : new FormData();
      if (elt.tagName !== "FORM") body.append(elt.name, elt.value);
      const vals = JSON.parse(elt.getAttribute("hx-vals") || "{}");
      for (const [k, v] of Object.entries(vals)) body.set(k, v);
      fetch(elt.getAttribute("hx-post"), {
        method: "POST", body, keepalive: true, credentials: "same-origin",
        headers: { "X-CSRFToken": csrf || "", "HX-Request": "true" },
      }).catch(() => {});
    }
  });
})();
