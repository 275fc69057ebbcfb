// Past mocks of one loop: the overall score and each competency over time (0-10).
document.addEventListener("DOMContentLoaded", () => {
  const data = JSON.parse(document.getElementById("mock-history-data").textContent);
  const when = data.history.map((h) => h.when);
  const traces = [{
    x: when, y: data.history.map((h) => h.overall), name: "overall",
    mode: "lines+markers", type: "scatter", line: { width: 3 },
  }];
  for (const c of data.competencies) {
    const y = data.history.map((h) => (c in h.competencies ? h.competencies[c] : null));
    if (y.some((v) => v !== null)) {
      traces.push({ x: when, y, name: c, mode: "lines+markers", type: "scatter", line: { dash: "dot" } });
    }
  }
  Plotly.newPlot("chart-mock-history", traces, {
    margin: { t: 20, r: 10, b: 40, l: 50 }, height: 300,
    yaxis: { title: { text: "score (0-10)" }, range: [0, 10] },
  }, { displayModeBar: false, responsive: true });
});
