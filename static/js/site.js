// Behaviour that used to sit in inline attributes (the Content-Security-Policy forbids
// inline script): `data-print` buttons print the page; forms with `data-confirm` ask first.
document.addEventListener("click", (ev) => {
  const button = ev.target.closest("[data-print]");
  if (button) {
    ev.preventDefault();
    window.print();
  }
});
document.addEventListener("submit", (ev) => {
  const form = ev.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) ev.preventDefault();
});
