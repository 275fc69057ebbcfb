// Mock interview clocks. The server sent the seconds left (its own clock); we count down
// from page load with performance.now(). At zero the question's boxes are sent with the
// "next" form, so the server stores them (late if past its deadline) and moves on.
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
  window.mockClock = { questionLeft: () => left(clocks[0]), loopLeft: () => left(clocks[1]), state };
  const tick = () => {
    for (const c of clocks) {
      const s = left(c);
      c.el.textContent = fmt(s);
      c.el.classList.toggle("low", s <= 60);
    }
    if (!state.expired && clocks.some((c) => left(c) <= 0)) {
      state.expired = true;
      nextForm.querySelector("input[name=timeup]").value = "1";
      carry();
      nextForm.submit();
    }
  };
  tick();
  setInterval(tick, 250);
});
