// trio-agents trace view (docs/observability.md#the-page). Plain script, no library, no network
// except trace serve's updates from the page's own origin. Every text from the trace is put in the
// page with textContent, never as HTML: a model's "<script>" stays text.
(function () {
  "use strict";
  const ROW = 24;          // px, one row of the tree (keep in step with --row in view.css)
  const OVERSCAN = 20;     // rows drawn above and below the visible ones
  const TREE_KINDS = { agent: "agent", tool: "tool" };
  const MARKS = {
    completed: "✓", ok: "✓", failed: "✗", error: "✗", cancelled: "⊘", denied: "⊘",
    max_turns: "⧗", budget_exceeded: "$", stopped: "■", running: "●", interrupted: "↯",
  };

  const $ = (id) => document.getElementById(id);
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fmtDuration(s) {
    if (s === null || s === undefined || isNaN(s)) return "?";
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) { const m = Math.floor(s / 60); return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s"; }
    const h = Math.floor(s / 3600); return h + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }
  function fmtTokens(n) {
    if (n < 1000) return String(n);
    if (n < 1e6) return (n / 1000).toFixed(1) + "k";
    return (n / 1e6).toFixed(1) + "M";
  }
  function fmtCost(c) { return c === null || c === undefined ? "" : "$" + (c < 0.01 ? c.toFixed(4) : c.toFixed(2)); }

  // ---------------------------------------------------------------- state
  let data = JSON.parse($("trace-data").textContent);
  let runIndex = Math.max(0, data.runs.length - 1);
  let run = null;             // the run shown
  let received = Date.now();  // when `data` arrived (running bars grow from its `now`)
  const collapsed = new Set();   // ids of collapsed nodes
  let selected = null;           // id of the selected node
  let visible = [];              // indices into run.nodes, in display order
  let matches = null;            // Set of matching indices when a filter is on
  let span = 1;                  // seconds the time axis covers
  let drawn = [-1, -1];

  function now() {
    if (!run) return 0;
    if (run.ended || !data.live) return run.now;
    return run.now + (Date.now() - received) / 1000;
  }
  function endOf(n) { return n.t1 === null ? now() : n.t1; }

  function prepare() {
    run = data.runs[runIndex] || null;
    if (!run) return;
    const nodes = run.nodes;
    for (let i = 0; i < nodes.length; i++) { nodes[i].kids = []; nodes[i].i = i; }
    for (const n of nodes) if (n.p >= 0) nodes[n.p].kids.push(n.i);
    let end = run.duration_s || 0;
    for (const n of nodes) end = Math.max(end, endOf(n));
    span = Math.max(end, 0.001);
  }

  // ---------------------------------------------------------------- filters
  function haystack(n) {
    if (n.hay === undefined) {
      n.hay = [n.name, n.id, n.summary || "", n.prompt || "", n.status].join("\n").toLowerCase();
    }
    return n.hay;
  }

  function computeVisible() {
    const nodes = run ? run.nodes : [];
    const query = $("search").value.trim().toLowerCase();
    const status = $("status-filter").value;
    const agentsOnly = $("agents-only").checked;
    const shown = (n) => !agentsOnly || n.k === "agent";
    matches = null;
    let keep = null;
    if (query || status) {
      matches = new Set();
      keep = new Set();
      for (const n of nodes) {
        if (!shown(n)) continue;
        if (status && n.status !== status) continue;
        if (query && haystack(n).indexOf(query) < 0) continue;
        matches.add(n.i);
        for (let up = n.i; up >= 0 && !keep.has(up); up = nodes[up].p) keep.add(up);
      }
    }
    visible = [];
    const stack = [];
    for (let i = nodes.length - 1; i >= 0; i--) if (nodes[i].p < 0) stack.push(i);
    while (stack.length) {
      const i = stack.pop();
      const n = nodes[i];
      if (keep && !keep.has(i)) continue;
      if (shown(n)) visible.push(i);
      if (!keep && collapsed.has(n.id)) continue;
      for (let k = n.kids.length - 1; k >= 0; k--) stack.push(n.kids[k]);
    }
    $("match-count").textContent = matches ? matches.size + " match" + (matches.size === 1 ? "" : "es") : "";
    $("spacer").style.height = visible.length * ROW + "px";
    drawn = [-1, -1];
  }

  // ---------------------------------------------------------------- header
  function drawHeader() {
    const facts = $("run-facts");
    facts.textContent = "";
    if (!run) { $("run-title").textContent = "an empty trace"; return; }
    $("run-title").textContent = "run " + run.run_id;
    const badge = $("run-status");
    badge.textContent = run.status;
    badge.style.background = "var(--" + statusVar(run.status) + ")";
    const add = (label, value) => {
      const span = el("span", null, label + " ");
      span.appendChild(el("b", null, value));
      facts.appendChild(span);
    };
    add("wall", fmtDuration(run.ended ? run.duration_s : now()));
    add("agents", run.agents);
    add("tool calls", run.tool_calls);
    add("tokens", fmtTokens(run.input_tokens) + "→" + fmtTokens(run.output_tokens));
    if (run.cost_usd !== null) add("cost", fmtCost(run.cost_usd));
    add("most agents at once", run.max_parallel_agents);
    if (run.permission_wait_s > 0) add("waiting for permission", fmtDuration(run.permission_wait_s));
    if (run.model) add("model", (run.provider ? run.provider + " · " : "") + run.model);
    if (run.version) add("trio-agents", run.version);
    $("live").hidden = !(data.live && !run.ended);
    const select = $("run-select");
    select.hidden = data.runs.length < 2;
    if (!select.hidden && select.options.length !== data.runs.length) {
      select.textContent = "";
      data.runs.forEach((r, i) => select.appendChild(new Option("run " + r.run_id + " · " + r.status, String(i))));
    }
    select.value = String(runIndex);
    const filter = $("status-filter");
    const wanted = new Set(run.nodes.map((n) => n.status));
    const have = new Set(Array.from(filter.options).map((o) => o.value));
    for (const s of Array.from(wanted).sort()) if (!have.has(s)) filter.appendChild(new Option(s, s));
  }

  function statusVar(s) {
    if (s === "completed" || s === "ok") return "ok";
    if (s === "failed" || s === "error") return "err";
    if (s === "running") return "run";
    if (s === "interrupted") return "int";
    if (s === "max_turns" || s === "budget_exceeded" || s === "stopped") return "warn";
    return "cancel";
  }

  function niceStep(total, count) {
    const raw = total / Math.max(1, count);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function drawAxis() {
    const axis = $("axis");
    const grid = $("grid");
    axis.textContent = "";
    grid.textContent = "";
    const head = $("chart-head").querySelector(".timeline");
    const left = head.offsetLeft;
    grid.style.left = left + "px";
    const width = Math.max(1, head.clientWidth);
    const step = niceStep(span, Math.max(2, Math.floor(width / 90)));
    for (let t = 0; t <= span + 1e-9; t += step) {
      const pct = (t / span) * 100 + "%";
      const tick = el("div", "tick", fmtDuration(t));
      tick.style.left = pct;
      axis.appendChild(tick);
      const line = el("div", "tick");
      line.style.left = pct;
      grid.appendChild(line);
    }
  }

  // ---------------------------------------------------------------- rows
  function pct(t) { return Math.min(100, Math.max(0, (t / span) * 100)); }

  function bar(n) {
    const start = n.t0 === null ? 0 : n.t0;
    const b = el("div", "bar b-" + n.status);
    b.style.left = pct(start) + "%";
    b.style.width = Math.max(0, pct(endOf(n)) - pct(start)) + "%";
    const length = Math.max(1e-9, endOf(n) - start);
    const inner = (a, z, cls) => {
      const seg = el("div", "seg " + cls);
      seg.style.left = ((a - start) / length) * 100 + "%";
      seg.style.width = Math.max(0.3, ((z - a) / length) * 100) + "%";
      b.appendChild(seg);
    };
    for (const m of n.model_calls || []) inner(m[0], m[1] === null ? now() : m[1], "model m-" + m[2]);
    for (const w of n.waits || []) inner(w[0], w[1], "wait");
    let tip = n.name + " · " + n.status + " · " + fmtDuration(n.dur === null ? endOf(n) - start : n.dur);
    if (n.model_calls && n.model_calls.length) tip += " · " + n.model_calls.length + " model call(s)";
    b.title = tip;
    return b;
  }

  function rowFor(i) {
    const n = run.nodes[i];
    const agentsOnly = $("agents-only").checked;
    const row = el("div", "row " + TREE_KINDS[n.k]);
    row.dataset.index = String(i);
    row.dataset.id = n.id;
    if (n.id === selected) row.classList.add("selected");
    if (matches && matches.has(i)) row.classList.add("match");
    const tree = el("div", "cell tree");
    tree.style.paddingLeft = 6 + (agentsOnly ? n.ad : n.lv) * 14 + "px";
    const hasKids = n.kids.length > 0 && !(agentsOnly && n.k === "tool");
    const toggle = el("span", "toggle" + (hasKids ? (collapsed.has(n.id) ? " shut" : " open") : ""));
    toggle.dataset.toggle = "1";
    tree.appendChild(toggle);
    tree.appendChild(el("span", "mark s-" + n.status, MARKS[n.status] || "·"));
    tree.title = n.k === "agent" ? n.name + " " + n.id : (n.summary || n.name) + " " + n.id;
    if (n.k === "agent") {
      tree.appendChild(el("span", "name", n.name));
      tree.appendChild(el("span", "sub", n.id + (n.status !== "completed" ? " · " + n.status : "")));
    } else {
      tree.appendChild(el("span", "name", n.summary || n.name));
      if (n.status !== "ok") tree.appendChild(el("span", "sub s-" + n.status, n.status));
    }
    row.appendChild(tree);
    const start = n.t0 === null ? 0 : n.t0;
    row.appendChild(el("div", "cell num", fmtDuration(n.dur === null ? endOf(n) - start : n.dur)));
    let tokens = "";
    if (n.k === "agent") {
      tokens = fmtTokens(n.tin) + "→" + fmtTokens(n.tout);
      if (n.scost !== null && n.scost !== undefined) tokens += " " + fmtCost(n.scost);
    }
    row.appendChild(el("div", "cell num tokens", tokens));
    const timeline = el("div", "cell timeline");
    if (n.t0 !== null) timeline.appendChild(bar(n));
    row.appendChild(timeline);
    return row;
  }

  function drawRows(force) {
    const viewport = $("viewport");
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW) - OVERSCAN);
    const last = Math.min(visible.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW) + OVERSCAN);
    if (!force && first === drawn[0] && last === drawn[1]) return;
    drawn = [first, last];
    const rows = $("rows");
    const fragment = document.createDocumentFragment();
    for (let r = first; r < last; r++) fragment.appendChild(rowFor(visible[r]));
    rows.textContent = "";
    rows.appendChild(fragment);
    rows.style.transform = "translateY(" + first * ROW + "px)";
    if (!visible.length) rows.appendChild(el("div", "empty", run ? "Nothing matches." : "No events yet."));
  }

  // ---------------------------------------------------------------- detail
  function section(parent, title, text) {
    if (text === null || text === undefined || text === "") return;
    parent.appendChild(el("h3", null, title));
    parent.appendChild(el("pre", null, text));
  }

  function drawDetail() {
    const box = $("detail");
    const n = run && selected !== null ? run.nodes.find((x) => x.id === selected) : null;
    box.textContent = "";
    if (!n) {
      box.appendChild(el("p", "hint", "Click a row to see its events, prompt, text and tool input/output."));
      return;
    }
    const h = el("h2");
    h.appendChild(el("span", "mark s-" + n.status, MARKS[n.status] || "·"));
    h.appendChild(el("span", null, (n.k === "agent" ? "agent " : "tool call ") + n.name));
    box.appendChild(h);
    const dl = el("dl");
    const fact = (k, v) => { if (v === null || v === undefined || v === "") return; dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", null, v)); };
    fact("id", n.id);
    fact("status", n.status);
    fact("started", n.t0 === null ? "?" : "+" + fmtDuration(n.t0));
    fact("duration", fmtDuration(n.dur === null ? endOf(n) - (n.t0 || 0) : n.dur));
    if (n.k === "agent") {
      fact("turns", n.turns);
      const calls = n.model_calls || [];
      if (calls.length) {
        const busy = calls.reduce((sum, m) => sum + ((m[1] === null ? now() : m[1]) - m[0]), 0);
        fact("model calls", calls.length + ", " + fmtDuration(busy) + " in all");
      }
      fact("tokens", fmtTokens(n.in) + "→" + fmtTokens(n.out) + " own, " + fmtTokens(n.tin) + "→" + fmtTokens(n.tout) + " subtree");
      if (n.cost !== null) fact("cost", fmtCost(n.cost) + " own, " + fmtCost(n.scost) + " subtree");
    } else if (n.output_len > (n.output || "").length) {
      fact("output", n.output_len + " characters (the first " + n.output.length + " shown)");
    }
    if (n.cancel) fact("cancelled", "by " + n.cancel.by + ": " + n.cancel.reason);
    box.appendChild(dl);
    if (n.p >= 0) {
      const up = run.nodes[n.p];
      const link = el("a", null, "↑ " + (up.k === "agent" ? "agent " + up.name : up.summary || up.name));
      link.dataset.select = up.id;
      box.appendChild(link);
    }
    section(box, "error", n.error);
    section(box, "result", n.result);
    section(box, "prompt", n.prompt);
    section(box, "text (its end)", n.text);
    section(box, "input", n.input);
    section(box, "output", n.output);
    box.appendChild(el("h3", null, "events (" + (n.events.length + n.more_events) + ")"));
    const table = el("table", "events");
    for (const e of n.events) {
      const tr = el("tr");
      tr.appendChild(el("td", "t", "+" + fmtDuration(e[1] - run.started_ts)));
      tr.appendChild(el("td", "k", e[2] + (e[4] > 1 ? " ×" + e[4] : "")));
      tr.appendChild(el("td", "x", e[3]));
      table.appendChild(tr);
    }
    box.appendChild(table);
    if (n.more_events) box.appendChild(el("p", "muted", n.more_events + " more events not shown"));
  }

  // ---------------------------------------------------------------- legend, wiring
  function drawLegend() {
    const legend = $("legend");
    const item = (style, text) => {
      const s = el("span");
      const sw = el("span", "sw");
      sw.style.background = style;
      s.appendChild(sw);
      s.appendChild(document.createTextNode(text));
      legend.appendChild(s);
    };
    item("var(--ok-soft)", "agent alive (waiting: for tools, sub-agents, a slot)");
    item("var(--ok)", "model call");
    item("#b7c6fb", "tool call");
    item("repeating-linear-gradient(45deg,#f59f00 0 3px,transparent 3px 6px)", "waiting for permission");
    item("var(--err-soft)", "failed");
    item("var(--cancel-soft)", "cancelled");
    item("repeating-linear-gradient(45deg,var(--run-soft) 0 6px,#dbe9f8 6px 12px)", "running");
  }

  function redraw() {
    prepare();
    drawHeader();
    computeVisible();
    drawAxis();
    drawRows(true);
    drawDetail();
  }

  function select(id) {
    selected = id;
    const i = run.nodes.findIndex((x) => x.id === id);
    if (i >= 0) {
      for (let up = run.nodes[i].p; up >= 0; up = run.nodes[up].p) collapsed.delete(run.nodes[up].id);
      computeVisible();
      const r = visible.indexOf(i);
      const viewport = $("viewport");
      if (r >= 0 && (r * ROW < viewport.scrollTop || (r + 1) * ROW > viewport.scrollTop + viewport.clientHeight)) {
        viewport.scrollTop = Math.max(0, r * ROW - viewport.clientHeight / 3);
      }
    }
    drawRows(true);
    drawDetail();
  }

  $("rows").addEventListener("click", (event) => {
    const row = event.target.closest(".row");
    if (!row) return;
    const n = run.nodes[Number(row.dataset.index)];
    if (event.target.dataset.toggle && n.kids.length) {
      if (collapsed.has(n.id)) collapsed.delete(n.id); else collapsed.add(n.id);
      computeVisible();
      drawRows(true);
      return;
    }
    select(n.id);
  });
  $("detail").addEventListener("click", (event) => {
    const id = event.target.dataset && event.target.dataset.select;
    if (id) select(id);
  });
  $("viewport").addEventListener("scroll", () => drawRows(false), { passive: true });
  $("viewport").addEventListener("keydown", (event) => {
    if (!run || (event.key !== "ArrowDown" && event.key !== "ArrowUp")) return;
    event.preventDefault();
    const at = visible.indexOf(run.nodes.findIndex((x) => x.id === selected));
    const next = visible[Math.min(visible.length - 1, Math.max(0, at + (event.key === "ArrowDown" ? 1 : -1)))];
    if (next !== undefined) select(run.nodes[next].id);
  });
  let typing = null;
  $("search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { computeVisible(); drawRows(true); }, 120);
  });
  for (const id of ["status-filter", "agents-only"]) {
    $(id).addEventListener("change", () => { computeVisible(); drawRows(true); });
  }
  $("expand-all").addEventListener("click", () => { collapsed.clear(); computeVisible(); drawRows(true); });
  $("collapse-all").addEventListener("click", () => {
    for (const n of run.nodes) if (n.kids.length && n.p >= 0) collapsed.add(n.id);
    computeVisible();
    drawRows(true);
  });
  $("run-select").addEventListener("change", (event) => {
    runIndex = Number(event.target.value);
    selected = null;
    redraw();
  });
  window.addEventListener("resize", () => { drawAxis(); drawRows(true); });

  // trace serve: the server sends the whole model again when the trace grows (server-sent events).
  if (data.live) {
    const source = new EventSource("events");
    source.addEventListener("data", (event) => {
      const following = data.runs.length - 1 === runIndex;
      data = JSON.parse(event.data);
      received = Date.now();
      if (following) runIndex = Math.max(0, data.runs.length - 1);
      redraw();
    });
    setInterval(() => { if (run && !run.ended) { prepare(); drawHeader(); drawRows(true); } }, 1000);
  }

  drawLegend();
  redraw();
  document.documentElement.dataset.ready = "1";
})();
