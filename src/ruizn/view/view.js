"use strict";
// Draws the run held in #run-data. Every text from the log is put in the page with
// textContent (el() below): nothing from the log is ever parsed as HTML.
(function () {
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const run = data.run;

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent, ...children) {
    for (const child of children) if (child) parent.appendChild(child);
    return parent;
  }
  // One formatter for every number: toLocaleString builds a new one per call (10x slower).
  const numbers = new Intl.NumberFormat("en-US");
  const num = (n) => numbers.format(Number(n || 0));
  // "1 step", "2 steps": the number and the noun that agrees with it (format.counted).
  const counted = (n, noun, nouns) => num(n) + " " + (Number(n) === 1 ? noun : (nouns || noun + "s"));
  function dur(s) {
    if (s === null || s === undefined) return "?";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    const m = Math.floor(s / 60);
    return m + "m" + String(Math.round(s - m * 60)).padStart(2, "0") + "s";
  }
  function clock(rel) {
    if (rel === null || rel === undefined) return "";
    const d = new Date((run.start + rel) * 1000);
    const two = (n) => String(n).padStart(2, "0");
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + "." + String(d.getMilliseconds()).padStart(3, "0");
  }
  function bytes(n) {
    // As ruizn.format.human_bytes: the same figure the terminal gives.
    if (n < 1024) return n + " B";
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KB";
    return (n / (1024 * 1024)).toFixed(1) + " MB";
  }
  function cost(value) {
    // Unknown is never $0.00.
    return value === null || value === undefined ? "cost unknown" : "$" + value.toFixed(4);
  }
  function usageText(u, c) {
    if (!u) return "";
    return "in " + num(u.in + u.cr + u.cw) + " · out " + num(u.out) + " · cache read " + num(u.cr) +
      (u.cw ? " · cache write " + num(u.cw) : "") + " · " + cost(c);
  }
  // A text the page holds maybe cut: the shown part, then what was left out.
  function textBlock(tag, cls, t) {
    const node = el(tag, cls, t.t);
    return node;
  }
  function cutNote(t) {
    if (t.n <= t.t.length) return null;
    return el("div", "cut", "showing " + num(t.t.length) + " of " + counted(t.n, "character") + " (all of it is in the log)");
  }
  function firstLine(t, max) {
    const line = t.split("\n", 1)[0];
    return line.length > max ? line.slice(0, max) + "…" : line;
  }
  function collapsible(label, t, open) {
    const d = el("details");
    if (open) d.open = true;
    add(d, el("summary", null, label), textBlock("pre", null, t), cutNote(t));
    return d;
  }

  // -- header ---------------------------------------------------------------------------
  document.title = "ruizn · " + run.id;
  const head = document.getElementById("head");
  const h1 = add(el("h1"), el("span", "mono", run.id), el("span", "badge " + run.status, run.status.replace("_", " ")), el("span", "mono", run.model));
  const calls = data.steps.reduce((n, s) => n + s.attempts.length, 0);
  const tools = data.steps.reduce((n, s) => n + s.tools.length, 0);
  const stats = el("div", "stats");
  for (const s of [
    counted(data.steps.length, "step"), counted(calls, "model call"), counted(tools, "tool call"), dur(run.elapsed),
    run.usage ? usageText(run.usage, run.cost) : "",
    data.sessions.length > 1 ? counted(data.sessions.length, "session") : "",
    counted(run.events, "event"),
  ]) if (s) stats.appendChild(el("span", null, s));
  add(head, h1, textBlock("div", "goal", run.goal), stats);
  if (run.answer) add(head, textBlock("div", "answer", run.answer));
  if (run.error) add(head, textBlock("div", "error", run.error));

  // -- timeline (left) and transcript (right) ------------------------------------------
  const timeline = document.createDocumentFragment();
  const transcript = document.createDocumentFragment();
  const LANE = 15;
  // One time scale for every step (the longest step fills the track), so bars compare
  // across steps; a click on the scale row gives each step its own scale instead.
  const longest = data.steps.reduce((m, s) => Math.max(m, s.end - s.start), 0);
  let shared = true;

  function place(b, len) {
    const from = Number(b.dataset.from), to = Number(b.dataset.to);
    const start = len > 0 ? from / len : 0;
    const width = len > 0 ? (to - from) / len : 1;
    b.style.left = (100 * Math.min(Math.max(start, 0), 1)).toFixed(3) + "%";
    b.style.width = (100 * Math.min(Math.max(width, 0), 1 - Math.min(Math.max(start, 0), 1))).toFixed(3) + "%";
  }
  function bar(cls, from, to, span, text, title) {
    const b = el("div", "bar " + cls, text);
    b.dataset.from = String(from - span.t0);
    b.dataset.to = String(Math.max(to, from) - span.t0);
    place(b, span.len);
    if (title) b.title = title;
    return b;
  }
  function rescale() {
    for (const track of document.querySelectorAll("#timeline .track")) {
      const len = shared ? longest : Number(track.dataset.own);
      for (const b of track.children) place(b, len);
    }
  }

  function toolStatus(t) {
    if (t.approval && t.approval.ok === false) return ["denied", "denied by " + t.approval.by];
    if (!t.result) return ["open", t.start === null ? "not run" : "running (no result in the log)"];
    if (t.err) return ["err", "error: " + (t.etype || "?") + " · " + counted(t.result.n, "char")];
    return ["ok", "ok · " + counted(t.result.n, "char")];
  }

  function stepRow(s) {
    const row = el("div", "row");
    row.dataset.step = String(s.n);
    const last = s.attempts[s.attempts.length - 1];
    add(row, add(el("div", "label"), el("strong", null, "step " + s.n), el("div", null, dur(s.end - s.start))));
    const right = el("div");
    const track = el("div", "track");
    track.dataset.own = String(s.end - s.start);
    const span = { t0: s.start, len: shared ? longest : s.end - s.start };
    let lanes = 1;
    for (const a of s.attempts) {
      const cls = "call " + (a.outcome === "failed" ? "failed" : a.outcome === "open" ? "open" : "");
      const end = a.end === null ? s.end : a.end;
      const what = a.outcome === "failed" ? "attempt " + a.a + " failed: " + a.etype : "model " + dur(end - a.start);
      const b = bar(cls, a.start, end, span, what, what);
      b.style.top = "0px";
      track.appendChild(b);
    }
    for (const t of s.tools) {
      const top = 1 + t.lane;
      lanes = Math.max(lanes, top + 1);
      if (t.approval && t.approval.req !== null) {
        const decided = t.approval.dec === null ? s.end : t.approval.dec;
        const w = bar("wait", t.approval.req, decided, span, "approval", "waiting for approval " + dur(decided - t.approval.req));
        w.style.top = top * LANE + "px";
        track.appendChild(w);
      }
      const [kind, text] = toolStatus(t);
      const from = t.start === null ? (t.end === null ? s.end : t.end) : t.start;
      const to = t.end === null ? s.end : t.end;
      const b = bar("tool " + kind, from, to, span, t.name, t.name + " · " + text + (t.start !== null ? " · " + dur(to - from) : ""));
      b.style.top = top * LANE + "px";
      track.appendChild(b);
    }
    track.style.height = lanes * LANE + "px";
    add(right, track);
    if (last) {
      const m = last.usage ? dur(last.end - last.start) + " · " + usageText(last.usage, last.cost) : last.outcome === "open" ? "in flight when the log ends" : "failed";
      const retries = s.attempts.length > 1 ? " · " + (s.attempts.length - 1) + " retr" + (s.attempts.length > 2 ? "ies" : "y") : "";
      add(right, el("div", "metrics", m + retries + (s.tools.length ? " · " + counted(s.tools.length, "tool call") : "")));
    }
    row.appendChild(right);
    return row;
  }

  // An `agent` call's child run, drawn inside the call: its steps as the run's own are,
  // on the same clock; a child whose log was not read is named only.
  function childRun(c, prefix) {
    const line = "agent " + c.agent + " · run " + c.run + " · " + (c.status ? c.status.replace("_", " ") : "no end in the log") + " · " + counted(c.steps, "step") + " · " + cost(c.cost);
    const box = el("div", "child");
    add(box, el("div", "note agent", line));
    if (c.error) add(box, el("div", "note fail", c.error.t));
    if (!c.page) return add(box, el("div", "note warn", "its log is not here: only what this run's log says of it is shown"));
    const d = el("details");
    add(d, el("summary", null, "its run · " + counted(c.page.steps.length, "step") + (c.desc ? " · " + c.desc : "")));
    add(d, textBlock("div", "text", c.page.run.goal), cutNote(c.page.run.goal));
    for (const s of c.page.steps) d.appendChild(stepSection(s, prefix + c.run + "-"));
    if (c.page.run.answer) add(d, el("div", "note", "its answer"), textBlock("div", "answer", c.page.run.answer));
    return add(box, d);
  }

  function stepSection(s, prefix) {
    prefix = prefix || "";
    const sec = el("section", "step");
    sec.id = prefix + "step-" + s.n;
    add(sec, add(el("h3"), el("span", null, "Step " + s.n), el("span", "when", clock(s.start) + " · " + dur(s.end - s.start))));
    for (const a of s.attempts) {
      if (a.outcome === "failed") {
        const code = a.code ? " (" + a.code + ")" : "";
        const next = a.retry ? " · retried in " + dur(a.retry_in) : " · not retried";
        add(sec, el("div", "note fail", "attempt " + a.a + " failed after " + dur(a.end - a.start) + ": " + a.etype + code + ": " + a.message.t + next));
      } else if (a.outcome === "open") {
        add(sec, el("div", "note warn", "attempt " + a.a + " was in flight when the log ends"));
      } else {
        const ttft = a.ttft !== null ? " · first token " + dur(a.ttft) : "";
        add(sec, el("div", "note", "model call " + dur(a.end - a.start) + ttft + " · " + usageText(a.usage, a.cost) + (a.stop ? " · stop: " + a.stop : "")));
        if (a.stop === "refusal") add(sec, el("div", "note fail", "the model refused to answer"));
      }
    }
    for (const b of s.blocks) {
      if (b.k === "text") add(sec, textBlock("div", "text", b), cutNote(b));
      else if (b.k === "thinking") add(sec, collapsible("thinking · " + counted(b.n, "char"), b, false));
      else add(sec, el("div", "note", "redacted thinking · " + num(b.n) + " bytes"));
    }
    for (const t of s.tools) {
      const box = el("div", "toolbox");
      box.id = prefix + "tool-" + t.id;
      const [kind, text] = toolStatus(t);
      const timing = t.start !== null && t.end !== null ? " · " + dur(t.end - t.start) : "";
      add(box, add(el("div"), el("span", "name", t.name), el("span", "status " + kind, "  " + text + timing), el("span", "note mono", "  " + t.id)));
      if (t.approval) {
        const a = t.approval;
        let line = "approval asked " + clock(a.req);
        if (a.ok === null) line += " · no decision in the log";
        else line += " · " + (a.ok ? "approved" : "denied") + " by " + a.by + " at " + clock(a.dec) + " (after " + dur(a.dec - a.req) + ")" + (a.always ? " · always for this tool" : "");
        add(box, el("div", "note " + (a.ok === false ? "fail" : "ok"), line));
        if (a.reason) add(box, el("div", "note", "reason: " + a.reason.t));
      }
      if (t.cmd) add(box, textBlock("pre", "cmd", { t: "$ " + t.cmd.t, n: t.cmd.n + 2 }), cutNote(t.cmd));
      if (t.images && t.images.length) box.appendChild(thumbs(t.images));
      add(box, collapsible("input · " + firstLine(t.input.t.replace(/\s+/g, " "), 100), t.input, false));
      if (t.result && t.cmd) add(box, collapsible("output · " + counted(t.result.n, "char") + " · " + firstLine(t.result.t.split("\n").filter((l) => l).pop() || "", 100), t.result, false));
      else if (t.result) add(box, collapsible("result · " + counted(t.result.n, "char") + " · " + firstLine(t.result.t, 100), t.result, false));
      if (t.child) box.appendChild(childRun(t.child, prefix));
      sec.appendChild(box);
    }
    return sec;
  }

  // Images a tool returned, drawn from the log's base64 as data: URLs. The page's data
  // holds only PNG, JPEG, GIF and WebP whose bytes were checked (ruizn.view.page.thumbnail);
  // checked again here, so nothing else can become a URL.
  const PICTURES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
  const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
  function thumbs(list) {
    const box = el("div", "thumbs");
    for (const im of list) {
      if (!PICTURES.has(im.mt) || !BASE64.test(im.b64)) continue;
      const fig = el("figure", "thumb");
      const img = document.createElement("img");
      img.alt = im.line;
      img.title = im.line + " · click to enlarge";
      img.src = "data:" + im.mt + ";base64," + im.b64;
      img.addEventListener("click", () => fig.classList.toggle("big"));
      add(fig, img, el("figcaption", null, im.line));
      box.appendChild(fig);
    }
    return box;
  }

  // Between steps: tool results cleared from the history, a shared budget found spent.
  function markText(m) {
    if (m.kind === "checkpoint") {
      return "files: " + m.text + (m.changed.length ? " · the step changed " + counted(m.changed.length, "file") : "");
    }
    if (m.kind === "context_cleared") {
      return "context: cleared " + counted(m.cleared.length, "old tool result") + " (" + bytes(m.bytes) + ") to stay under " + num(m.limit) + " tokens";
    }
    if (m.kind === "context_compacted") {
      return "context: compacted into a summary (" + (m.budget === "server" ? "the API's compaction" : "ruizn's own summary") + "), about " + num(m.limit) + " tokens after · " + cost2(m.spent);
    }
    return "budget " + m.budget + ": " + cost2(m.spent) + " of " + cost2(m.limit) + " spent, no more model calls";
  }
  function cost2(v) { return v === null || v === undefined ? "?" : "$" + Number(v).toFixed(2); }
  function drawMark(m) {
    const text = markText(m);
    timeline.appendChild(el("div", "row marker mark " + m.kind, clock(m.at) + " · " + text));
    const box = el("div", "session mark " + m.kind, text);
    if (m.kind === "context_cleared" && m.cleared.length) {
      const d = el("details");
      add(d, el("summary", null, "which results (the log keeps them whole)"));
      const list = el("ul");
      for (const c of m.cleared) list.appendChild(el("li", "mono", c.name + " · " + c.id + " · " + bytes(c.size)));
      box.appendChild(add(d, list));
    }
    if (m.kind === "checkpoint" && m.changed.length) {
      const d = el("details");
      add(d, el("summary", null, "the files the step changed (ruizn diff RUN --files --step N)"));
      const list = el("ul");
      for (const path of m.changed) list.appendChild(el("li", "mono", path));
      box.appendChild(add(d, list));
    }
    transcript.appendChild(box);
  }

  function sessionStart(se) {
    const text = se.resumed
      ? "resumed at " + clock(se.start) + " · max steps " + se.max_steps + (se.approval ? " · approval " + se.approval : "") + (se.torn ? " · cut a torn last line of " + se.torn + " bytes" : "")
      : "started at " + clock(se.start) + " · max steps " + se.max_steps + " · approval " + run.approval;
    timeline.appendChild(el("div", "row marker", text));
    const box = el("div", "session", text);
    if (!se.resumed) {
      add(box, collapsible("system prompt · " + counted(run.system.n, "char"), run.system, false));
      add(box, el("div", "note", "tools: " + (run.tools.length ? run.tools.join(", ") : "none")));
    }
    transcript.appendChild(box);
  }
  function sessionEnd(se) {
    if (se.status === null) return;
    const text = "finished: " + se.status.replace("_", " ") + " · " + counted(se.steps, "step") + " · " + dur(se.elapsed) + (se.error ? " · " + se.error.t : "");
    timeline.appendChild(el("div", "row marker end", text));
    transcript.appendChild(el("div", "session", text));
  }

  // Sessions and steps in time order: a session's steps lie between its start and the next.
  const sessions = data.sessions.slice();
  let si = 0;
  const goal = el("div", "session");
  add(goal, el("div", "note", "goal"), textBlock("div", "text", run.goal), cutNote(run.goal));
  transcript.appendChild(goal);
  const scaleRow = el("div", "row marker scale");
  const scaleButton = el("button", null, "time scale: one for all steps (click: each step its own)");
  scaleButton.addEventListener("click", (ev) => {
    ev.stopPropagation();
    shared = !shared;
    scaleButton.textContent = shared ? "time scale: one for all steps (click: each step its own)" : "time scale: each step its own (click: one for all steps)";
    rescale();
  });
  timeline.appendChild(add(scaleRow, scaleButton));
  const marks = (data.marks || []).slice();
  let mi = 0;
  for (const s of data.steps) {
    while (si < sessions.length && sessions[si].start <= s.start) {
      if (si > 0) sessionEnd(sessions[si - 1]);
      sessionStart(sessions[si]);
      si += 1;
    }
    while (mi < marks.length && marks[mi].after < s.n) drawMark(marks[mi++]);
    timeline.appendChild(stepRow(s));
    transcript.appendChild(stepSection(s, ""));
  }
  while (mi < marks.length) drawMark(marks[mi++]);
  while (si < sessions.length) {
    if (si > 0) sessionEnd(sessions[si - 1]);
    sessionStart(sessions[si]);
    si += 1;
  }
  if (sessions.length) sessionEnd(sessions[sessions.length - 1]);
  if (run.status === "running" || run.status === "interrupted") {
    const text = run.status === "running" ? "the run is still going: view it again for the rest" : "interrupted: the log ends without run_finished (resume it with ruizn resume " + run.id + ")";
    timeline.appendChild(el("div", "row marker end", text));
    transcript.appendChild(el("div", "session", text));
  }
  document.getElementById("timeline").appendChild(timeline);
  document.getElementById("transcript").appendChild(transcript);

  // A click on a step of the timeline shows that step of the transcript.
  let current = [];
  document.getElementById("timeline").addEventListener("click", (ev) => {
    const row = ev.target.closest(".row[data-step]");
    if (!row) return;
    for (const node of current) node.classList.remove("current");
    const sec = document.getElementById("step-" + row.dataset.step);
    current = [row, sec].filter(Boolean);
    for (const node of current) node.classList.add("current");
    if (sec) sec.scrollIntoView({ block: "start" });
  });

  // The page is drawn: a marker for tests and the benchmark (ms since navigation start,
  // after a forced layout).
  document.body.getBoundingClientRect();
  document.documentElement.dataset.readyMs = String(Math.round(performance.now()));
  document.documentElement.dataset.ready = "1";
})();
