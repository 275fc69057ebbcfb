// The interviewer seat: one EventSource; `answer` events replace the text of the matching
// box (item + slot), `item` marks the question being asked now, `end` closes the stream.
document.addEventListener("DOMContentLoaded", () => {
  const status = document.getElementById("live-status");
  const state = { answers: 0, connected: false, ended: false };
  window.mockLive = state; // read by the browser tests
  const markCurrent = (order) => {
    document.querySelectorAll(".interviewer-item").forEach((el) => {
      el.classList.toggle("current", String(order) === el.dataset.item);
    });
  };
  const source = new EventSource(status.dataset.eventsUrl);
  source.onopen = () => { state.connected = true; status.textContent = "Live: answers appear as they are typed."; };
  source.onerror = () => { if (!state.ended) status.textContent = "Reconnecting…"; };
  source.addEventListener("answer", (e) => {
    const d = JSON.parse(e.data);
    const box = document.querySelector(`.live-answer[data-item="${d.item}"][data-slot="${d.slot}"]`);
    // Keep the newest text per box: a stream entry older than the snapshot is skipped.
    if (box && (d.t || 0) >= Number(box.dataset.t || 0)) {
      box.textContent = d.text;
      box.dataset.t = d.t || 0;
    }
    state.answers += 1;
  });
  source.addEventListener("item", (e) => {
    const d = JSON.parse(e.data);
    if (d.item === null || d.item === undefined) return;
    markCurrent(d.item);
    // An arithmetic question draws its numbers when it starts: reload to show them.
    const section = document.getElementById(`item-${d.item}`);
    if (section && section.dataset.pending) window.location.reload();
  });
  source.addEventListener("end", () => {
    state.ended = true;
    source.close();
    status.textContent = "The mock is over.";
    document.getElementById("mock-ended").hidden = false;
  });
});
