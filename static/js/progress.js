// Draw the progress charts from the JSON the page embeds (tables carry the same data).
document.addEventListener("DOMContentLoaded", () => {
  const data = JSON.parse(document.getElementById("progress-data").textContent);
  // automargin: long tick labels (competency names) widen the margin instead of being clipped.
  const layout = (title, extra) => {
    const out = Object.assign({
      margin: { t: 20, r: 10, b: 40, l: 50 }, height: 280, showlegend: true,
      yaxis: { title, rangemode: "tozero" },
    }, extra || {});
    for (const axis of ["xaxis", "yaxis"]) out[axis] = Object.assign({ automargin: true }, out[axis]);
    return out;
  };
  const draw = (id, traces, chartLayout) => {
    if (document.getElementById(id)) Plotly.newPlot(id, traces, chartLayout, config);
  };
  const config = { displayModeBar: false, responsive: true };

  const byTopic = {};
  for (const h of data.history) {
    (byTopic[h.topic] = byTopic[h.topic] || { x: [], y: [], symbol: [], text: [] });
    byTopic[h.topic].x.push(h.when);
    byTopic[h.topic].y.push(Math.round(h.score * 100));
    // Re-graded attempts (a newer grader or rubric) are drawn hollow and say so on hover.
    byTopic[h.topic].symbol.push(h.regraded ? "circle-open" : "circle");
    byTopic[h.topic].text.push(h.regraded ? "re-graded" : "");
  }
  const history = Object.entries(byTopic).map(([topic, s]) => ({
    x: s.x, y: s.y, name: topic, mode: "lines+markers", type: "scatter",
    marker: { symbol: s.symbol, size: 8 }, text: s.text,
  }));
  draw("chart-history", history, layout("score %", { yaxis: { title: "score %", range: [0, 100] } }));

  draw("chart-competencies", [{
    type: "bar", orientation: "h",
    x: data.competencies.map((c) => Math.round(c.score * 100)),
    y: data.competencies.map((c) => c.competency),
  }], layout("", { showlegend: false, xaxis: { title: "mean score %", range: [0, 100] } }));

  draw("chart-due", [{
    type: "bar", x: data.due.map((d) => d.day), y: data.due.map((d) => d.due),
  }], layout("cards", { showlegend: false }));
});
