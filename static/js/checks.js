// The checks screen's countdown: the server says how many seconds are left (it keeps the
// real deadline); at 0 the form is sent as it stands, marked final (blanks change nothing).
(() => {
  const counter = document.getElementById("checks-remaining");
  const form = document.getElementById("checks-form");
  if (!counter || !form) return;
  const end = Date.now() + Number(counter.dataset.remaining || 0) * 1000;
  let sent = false;
  form.addEventListener("submit", () => { sent = true; });
  const tick = () => {
    const left = Math.max(0, Math.ceil((end - Date.now()) / 1000));
    counter.textContent = String(left);
    if (left > 0 || sent) return;
    sent = true;
    form.querySelector('input[name="final"]').value = "1";
    form.submit();
  };
  tick();
  setInterval(tick, 250);
})();
