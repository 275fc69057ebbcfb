// Mock interview clocks. The server sent the seconds left (its own clock); we count down
// from page load with performance.now(). When the question's clock reaches zero nothing
// moves: a "late" banner shows and the boxes stay editable until the learner submits or
// moves on (the server marks the answer late). When the loop's clock reaches zero the boxes
// are sent with the "next" form, so the server stores them and ends the mock.
document.addEventListener("DOMContentLoaded", () => {
  const t0 = performance.now();
  const clocks = [...document.querySelectorAll(".countdown")].map((el) => ({
    el, start: parseFloat(el.dataset.remainingS),
  }));
  const nextForm = document.getElementById("next-form");
  const state = { expired: false };
  const left = (c) => Math.max(0, c.start - (performance.now() - t0) / 1000);
  const fmt = (s) => {
    const total = Math.ceil(s);
    const h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), sec = total % 60;
    const mm = h ? String(m).padStart(2, "0") : String(m);
    return (h ? h + ":" : "") + mm + ":" + String(sec).padStart(2, "0");
  };
  // Copy every answer box into the "next" form, so moving on keeps what was typed.
  const carry = () => {
    nextForm.querySelectorAll("input[data-carried]").forEach((el) => el.remove());
    document.querySelectorAll("[data-slot]").forEach((box) => {
      const hidden = document.createElement("input");
      hidden.type = "hidden"; hidden.name = box.dataset.slot; hidden.value = box.value;
      hidden.dataset.carried = "1";
      nextForm.appendChild(hidden);
    });
  };
  nextForm.addEventListener("submit", carry);

  // Time is up: send the boxes with the "next" form. Sent with fetch first, so that a server
  // that does not answer (web process restarting) leaves the learner on this page with
  // everything typed, retried until it is stored, instead of on a browser error page.
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const say = (text) => {
    let el = document.getElementById("next-status");
    if (!el) {
      el = document.createElement("p");
      el.id = "next-status";
      el.className = "input-error";
      el.setAttribute("role", "alert");
      nextForm.appendChild(el);
    }
    el.textContent = text;
  };
  const sendNext = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        const resp = await fetch(nextForm.action, {
          method: "POST", body: new FormData(nextForm), redirect: "manual", credentials: "same-origin",
        });
        if (resp.type === "opaqueredirect" || resp.ok) { // stored: show the next question
          window.location.assign(nextForm.dataset.after || window.location.href);
          return;
        }
        if (resp.status !== 429 && resp.status < 500) { // refused: let the server's page say why
          nextForm.submit();
          return;
        }
      } catch (err) { /* no answer at all: the server is down or restarting */ }
      state.unsent = attempt;
      say("Time is up, but the server did not answer: your answers are still on this page and "
        + `are sent as soon as it does (attempt ${attempt}).`);
      await sleep(Math.min(5000, 1000 * 2 ** (attempt - 1)));
    }
  };
  window.mockClock = { questionLeft: () => left(clocks[0]), loopLeft: () => left(clocks[1]), state };
  const tick = () => {
    for (const c of clocks) {
      const s = left(c);
      c.el.textContent = fmt(s);
      c.el.classList.toggle("low", s <= 60);
    }
    if (!state.late && left(clocks[0]) <= 0) {
      state.late = true;
      document.getElementById("late-banner").hidden = false;
      document.getElementById("mock-bar").classList.add("late");
    }
    if (!state.expired && left(clocks[1]) <= 0) {
      state.expired = true;
      nextForm.querySelector("input[name=timeup]").value = "1";
      carry();
      sendNext();
    }
  };
  tick();
  setInterval(tick, 250);
});
