// The live run page: the predicted curves are drawn at once, measured points arrive over
// SSE (id = point seq) and are appended with Plotly.extendTraces in batches; a reload or a
// reconnect resumes after the last seq drawn, so no point is lost or drawn twice.
document.addEventListener("DOMContentLoaded", () => {
  const page = JSON.parse(document.getElementById("lab-run-data").textContent);
  const chartDiv = document.getElementById("lab-chart");
  const series = page.lab.series;
  const index = Object.fromEntries(series.map((s, i) => [s.name, i]));
  const predictedFor = {}; // measured series name -> predicted series name
  for (const s of series) if (s.kind === "predicted" && s.predicts) predictedFor[s.predicts] = s.name;
  const data = Object.fromEntries(series.map((s) => [s.name, []])); // name -> [{x, y, extra}]
  const state = { lastSeq: -1, drawn: 0, firstPointMs: null, ended: false, source: null };
  window.labRun = state; // read by the browser tests
  // Per live point (seq -> [written by the worker, SSE message received, drawn], epoch ms):
  // read by bench/web.py for the point written -> point drawn latency. A few bytes a point.
  const timing = {};
  window.__labDrawn = timing;
  let pendingSeqs = [];

  const fmt = (v) => (typeof v !== "number" ? String(v)
    : Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(4)
    : Number.isInteger(v) ? String(v) : v.toPrecision(5));

  const axisOf = (s) => (s.axis === "y2" || s.axis === "y3" ? s.axis : "y");
  // mode "bar": a bar trace; several bar series are stacked (a waterfall of hops per x).
  const traces = series.map((s) => (s.mode === "bar"
    ? { name: s.label, type: "bar", x: [], y: [], yaxis: axisOf(s),
      visible: s.hidden ? "legendonly" : true }
    : {
      name: s.label, type: "scatter", mode: s.mode, x: [], y: [],
      visible: s.hidden ? "legendonly" : true, // hidden: off until its legend entry is clicked
      yaxis: axisOf(s),
      line: s.kind === "predicted" ? { dash: "dash" } : {},
      // the spread of a point's repeats (extra.lo .. extra.hi) as error bars
      error_y: s.kind === "measured"
        ? { type: "data", symmetric: false, array: [], arrayminus: [], visible: true } : undefined,
    }));
  const chart = page.lab.chart;
  // On a phone a legend of many series wraps into rows; below the plot it ran over the
  // x-axis title, so there it goes above the plot, with the height grown to keep the plot.
  const narrow = chartDiv.clientWidth < 560;
  const layout = {
    margin: { t: 20, r: chart.y3_title ? 20 : chart.y2_title ? 60 : 10, b: 50, l: 70 },
    height: narrow ? 320 + 20 * series.length : 420,
    xaxis: { title: { text: chart.x_title }, type: chart.x_type },
    yaxis: { title: { text: chart.y_title }, type: chart.y_type, rangemode: "tozero" },
    legend: narrow ? { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" }
      : { orientation: "h", y: -0.2 },
  };
  if (series.some((s) => s.mode === "bar")) layout.barmode = "stack";
  if (chart.y2_title) {
    layout.yaxis2 = { title: { text: chart.y2_title }, overlaying: "y", side: "right", rangemode: "tozero" };
  }
  if (chart.y3_title) { // a third axis in its own unit: the plot narrows to leave it room
    layout.xaxis.domain = [0, narrow ? 0.72 : 0.84];
    layout.yaxis3 = { title: { text: chart.y3_title }, overlaying: "y", side: "right",
      anchor: "free", position: 1, rangemode: "tozero" };
  }
  Plotly.newPlot(chartDiv, traces, layout, { displayModeBar: false, responsive: true });

  let pending = {}; // trace index -> {x: [], y: []}
  const spread = {}; // trace index -> {plus: [], minus: []}, redrawn with the traces
  const add = (p, isMeasurement) => {
    if (!(p.series in index)) return;
    data[p.series].push(p);
    const i = index[p.series];
    (pending[i] = pending[i] || { x: [], y: [] });
    pending[i].x.push(p.x);
    pending[i].y.push(p.y);
    if (traces[i].error_y) {
      const e = (spread[i] = spread[i] || { plus: [], minus: [] });
      const lo = p.extra && typeof p.extra.lo === "number" ? p.extra.lo : p.y;
      const hi = p.extra && typeof p.extra.hi === "number" ? p.extra.hi : p.y;
      e.plus.push(Math.max(hi - p.y, 0));
      e.minus.push(Math.max(p.y - lo, 0));
    }
    if (isMeasurement) {
      state.lastSeq = Math.max(state.lastSeq, p.seq);
      state.drawn += 1;
      if (state.firstPointMs === null) state.firstPointMs = performance.now();
    }
  };
  const flush = () => {
    const idx = Object.keys(pending).map(Number);
    if (!idx.length) return;
    const seqs = pendingSeqs;
    Plotly.extendTraces(chartDiv, { x: idx.map((i) => pending[i].x), y: idx.map((i) => pending[i].y) }, idx)
      .then(() => {
        const withSpread = idx.filter((i) => spread[i]);
        if (withSpread.length) {
          Plotly.restyle(chartDiv, {
            "error_y.array": withSpread.map((i) => spread[i].plus),
            "error_y.arrayminus": withSpread.map((i) => spread[i].minus),
          }, withSpread);
        }
        const now = Date.now();
        for (const seq of seqs) timing[seq][2] = now;
      });
    pending = {};
    pendingSeqs = [];
    document.getElementById("point-count").textContent = state.drawn;
    renderTable();
  };

  // Predicted value for a measured point: its own extra.predicted, else the paired
  // predicted series at the same x (linear interpolation between its points).
  const predictedAt = (p) => {
    if (p.extra && typeof p.extra.predicted === "number") return p.extra.predicted;
    const other = predictedFor[p.series] && data[predictedFor[p.series]];
    if (!other || !other.length) return null;
    const pts = [...other].sort((a, b) => a.x - b.x);
    for (let k = 0; k < pts.length; k++) {
      if (pts[k].x === p.x) return pts[k].y;
      if (k > 0 && pts[k - 1].x < p.x && p.x < pts[k].x) {
        const t = (p.x - pts[k - 1].x) / (pts[k].x - pts[k - 1].x);
        return pts[k - 1].y + t * (pts[k].y - pts[k - 1].y);
      }
    }
    return null;
  };
  // Table rows are built as DOM nodes with textContent: nothing from the server is parsed
  // as HTML here.
  const row = (cells, head) => {
    const tr = document.createElement("tr");
    cells.forEach((text, k) => {
      const cell = document.createElement(head && k === 0 ? "th" : "td");
      cell.textContent = text;
      tr.appendChild(cell);
    });
    return tr;
  };
  const tbody = document.querySelector("#mvp-table tbody");
  const renderTable = () => {
    const rows = [];
    for (const s of series) {
      if (s.kind !== "measured") continue;
      for (const p of data[s.name]) {
        const pred = predictedAt(p);
        if (pred === null) continue;
        const ratio = pred !== 0 ? fmt(p.y / pred) : (p.y === 0 ? "1" : "—");
        rows.push(row([s.label, fmt(p.x), fmt(p.y), fmt(pred), ratio]));
      }
    }
    if (!rows.length) {
      const empty = row(["No measured point with a prediction yet."]);
      empty.firstChild.colSpan = 5;
      empty.firstChild.className = "empty";
      rows.push(empty);
    }
    tbody.replaceChildren(...rows);
  };

  const showStatus = (s) => {
    const el = document.getElementById("run-status");
    el.textContent = s.status.charAt(0).toUpperCase() + s.status.slice(1);
    el.dataset.status = s.status;
    if (s.worker) document.getElementById("run-worker").textContent = s.worker;
    if (s.device) document.getElementById("run-device").textContent = s.device;
    if (s.conditions) {
      const line = document.getElementById("run-conditions");
      line.querySelector("span").textContent = s.conditions;
      line.hidden = false;
    }
    const err = document.getElementById("run-error");
    err.textContent = s.error || "";
    err.hidden = !s.error;
    const done = ["done", "failed", "cancelled"].includes(s.status);
    // A cancel asked for and not yet honoured stays visible, across reloads too.
    if (s.status === "running" && s.cancel_requested) el.textContent = "Cancelling…";
    document.getElementById("cancel-run").hidden = done;
    // The constants the prediction uses, as soon as the worker measured them.
    if (s.constants) {
      const line = document.getElementById("run-constants");
      line.querySelector("span").textContent = s.constants;
      line.hidden = false;
    }
    // Formatted by the server (lab/summary_format.py): the same text as after a reload;
    // while running it holds what was measured before the points (constants, warm-up).
    if (s.summary_rows && s.summary_rows.length) {
      document.querySelector("#summary-table tbody").replaceChildren(
        ...s.summary_rows.map(([k, v]) => row([k, v], true)));
    }
    if (done && s.verdicts && s.verdicts.length) {
      document.getElementById("verdicts").replaceChildren(...s.verdicts.map((v) => {
        const li = document.createElement("li");
        li.dataset.status = v.status;
        const name = document.createElement("strong");
        name.textContent = v.series;
        li.append(name, ` (${v.claim}): ${v.text}`);
        return li;
      }));
    }
  };

  for (const p of page.predicted) add(p, false);
  for (const p of page.points) add(p, true);
  flush();
  showStatus(page.status); // the same text live and after a reload (e.g. "Cancelling…")
  renderTable();
  const timer = setInterval(flush, 200);

  if (!["done", "failed", "cancelled"].includes(page.status.status)) {
    // EventSource retries by itself after a network error (sending Last-Event-ID), but
    // gives up for good on an HTTP error (e.g. a proxy's 502 while the server restarts):
    // then open a new one after the last seq drawn.
    let reopens = 0;
    const connect = () => {
      const source = new EventSource(`${page.events_url}?last_id=${state.lastSeq}`);
      state.source = source;
      source.addEventListener("open", () => { reopens = 0; });
      source.addEventListener("error", () => {
        if (source.readyState !== EventSource.CLOSED || state.ended) return;
        if (++reopens <= 20) setTimeout(connect, 3000); // not forever (logged out, gone)
      });
      source.addEventListener("point", (ev) => {
        const received = Date.now();
        const p = JSON.parse(ev.data);
        if (p.seq > state.lastSeq) { // never twice, even across reconnects
          if (p.series in index) {
            timing[p.seq] = [p.written_ms ?? null, received, null];
            pendingSeqs.push(p.seq);
          }
          add(p, true);
        }
      });
      source.addEventListener("status", (ev) => showStatus(JSON.parse(ev.data)));
      source.addEventListener("end", (ev) => {
        showStatus(JSON.parse(ev.data));
        source.close();
        flush();
        clearInterval(timer);
        state.ended = true;
      });
    };
    connect();
  } else {
    state.ended = true;
  }

  document.getElementById("cancel-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    const resp = await fetch(form.action, {
      method: "POST", body: new FormData(form), headers: { Accept: "application/json" },
    });
    // The stream's `end` may arrive before this reply (the worker stops within 0.25 s):
    // then the reply's "running" is older news and must not overwrite the final status.
    if (!resp.ok) return;
    const s = await resp.json();
    // (checked after reading the body too: `end` can arrive while it is read)
    if (!state.ended) {
      showStatus(s);
      if (s.status === "running") document.getElementById("run-status").textContent = "Cancelling…";
    }
  });
});
