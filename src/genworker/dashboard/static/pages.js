// A worker's own pages, each linked under "More" on the worker's page and reading tenant-scoped JSON:
//   #/workers/{w}/autonomy     heartbeat runs, interruption-budget use and inbox arrivals per day, inbox depth
//   #/workers/{w}/timeline     recent runs, the calendar's next fires and due dates on one SVG time axis
//   #/workers/{w}/memory       what the worker remembers, by partition, searchable, read-only
//   #/workers/{w}/learning     the learned policy's versions (Apply / Roll back), the learning decision log
//                              with the version that decided each entry, the worker's conflict cases
//   #/workers/{w}/supervision  supervisor policies and the records kept with runs (Mark as looked at)
//   #/workers/{w}/spaces       context spaces by state, their facts and linked tasks (and the worker
//                              page's spaces block)
// Each is registered in dashboard.js's WORKER_PAGES (its route and JSON) and drawn by PAGES[name]; its
// section is added to <main> here. Uses dashboard.js's helpers (el, api, state, table, badge, ...).
(() => {
  "use strict";

  const NS = "http://www.w3.org/2000/svg";

  Object.assign(LABELS, {
    processing: "Being processed", consumed: "Consumed", dead: "Dead-lettered", heartbeat: "Heartbeat",
    duty: "Duty", goal: "Goal", chat: "Chat", im: "IM", event: "Event", sensor: "Sensor", schedule: "Schedule",
    manual: "Manual", task: "Task", cancelled: "Cancelled",
    run: "Run", conversation: "Conversation", worker: "Worker", tenant: "Tenant", episode: "Episode", summary: "Summary",
    preference: "Preference", decision: "Decision", consolidation: "Consolidation",
    promotion: "Promotion", import: "Import", statement: "Statement",
    shadow: "In shadow", rolled_back: "Rolled back", discarded: "Discarded", brief: "Reported in a brief",
    confirm: "Asks a person", gate: "Gate decision", feedback: "Feedback", policy: "Policy step",
    shadow_started: "Shadow started", proposed: "Proposed", applied: "Applied", frozen: "Frozen", unfrozen: "Unfrozen",
    edit_priority: "Priority edited", snooze: "Snoozed", accept_install: "Install accepted", decline_install: "Install declined",
    open: "Open", resolved: "Resolved", dropped: "Dropped", resource: "Resource", semantic: "Semantic",
    merge: "Merged", serialize: "One after the other", replan: "Replanned", escalate: "Asked a person",
    inactive: "Inactive", observing: "Watching", attention_required: "Needs a look", paused: "Paused",
    continue: "Continued", comment: "Comment", warn: "Warning", request_review: "Review requested", stop: "Stopped",
    dormant: "Dormant", parked: "Parked", archived: "Archived", merged: "Merged into another", confirmed: "Confirmed",
  });
  const VERSION_STATES = { shadow: "In shadow", active: "Applied", rolled_back: "Rolled back", discarded: "Discarded" };

  const search = { epoch: -1, worker: null, q: "", partition: "" };  // the memory page's search, per session

  function addView(name, title) {
    const section = el("section", { id: `view-${name}`, class: "view", "data-view": name, "aria-labelledby": `h-${name}`, hidden: true },
      el("h2", { id: `h-${name}`, text: title }), el("div", { class: "content" }));
    $("#view-missing").before(section);
  }

  function workerUrl(r, path) { return `/api/v1/workers/${encodeURIComponent(r.worker)}${path}`; }

  // A page: its route and title (WORKER_PAGES), its section, and its link on the worker's page. `source(r)`
  // is the JSON path, or a function that loads the page's data.
  const links = [];
  function register(name, title, source) {
    WORKER_PAGES[name] = { title, source };
    addView(name, title);
    links.push([name, title]);
  }

  register("autonomy", "Autonomy charts", (r) => workerUrl(r, "/dashboard/autonomy?days=14"));
  register("timeline", "Calendar timeline", (r) => workerUrl(r, "/dashboard/timeline"));
  register("memory", "Memory", (r) => {
    if (search.epoch !== state.epoch || search.worker !== r.worker) Object.assign(search, { epoch: state.epoch, worker: r.worker, q: "", partition: "" });
    const params = new URLSearchParams({ q: search.q });
    if (search.partition) params.set("partition", search.partition);
    return workerUrl(r, `/dashboard/memory?${params}`);
  });
  register("supervision", "Supervision", (r) => workerUrl(r, "/dashboard/supervision"));
  register("spaces", "Context spaces", (r) => workerUrl(r, "/spaces?limit=200"));
  register("learning", "Decision log and policy", (r) => async () => {
    const [learning, log, cases] = await Promise.all([api(workerUrl(r, "/learning")),
      api(workerUrl(r, "/learning/decisions?limit=200")), api("/api/v1/conflicts?limit=200")]);
    return { learning, decisions: log.decisions, generated_at: new Date().toISOString(),
      conflicts: cases.conflicts.filter((c) => c.worker_a_id === r.worker || c.worker_b_id === r.worker) };
  });

  const workerPage = PAGES.worker;
  PAGES.worker = function workerWithPages(data, r) {
    workerPage(data, r);
    const w = encodeURIComponent(r.worker);
    $("#view-worker .worker-head .content").append(el("p", { class: "page-links" }, "More: ",
      links.flatMap(([name, text], i) => [i ? " · " : "", el("a", { href: `#/workers/${w}/${name}`, text })])));
  };

  function heading(name, r) { $(`#h-${name}`).textContent = `${WORKER_PAGES[name].title} of ${r.worker}`; }
  document.addEventListener("console:forget", () => {
    for (const [name, page] of Object.entries(WORKER_PAGES)) $(`#h-${name}`).textContent = page.title;
    logView.kind = "";
  });

  // -- autonomy charts ----------------------------------------------------------------

  const INBOX_STATES = ["pending", "processing", "failed", "dead", "consumed"];
  const INBOX_COLOURS = { pending: "s0", processing: "s1", failed: "s4", dead: "bad", consumed: "s3" };

  PAGES.autonomy = function autonomyPage(d, r) {
    heading("autonomy", r);
    const days = d.days.map((x) => x.slice(5));
    const hb = d.heartbeat.per_day, budget = d.interruption_budget, inbox = d.inbox;
    const every = d.heartbeat.interval_s >= 3600 ? `${+(d.heartbeat.interval_s / 3600).toFixed(1)} h` : `${Math.round(d.heartbeat.interval_s / 60)} min`;
    const used = budget.per_day.map((x) => x.used);
    const over = budget.per_day.filter((x) => x.used >= budget.limit).length;
    $("#view-autonomy .content").replaceChildren(...[
      el("div", { class: "stats" },
        stat("Heartbeat runs", num(hb.reduce((a, x) => a + x.runs, 0))), stat("Failed heartbeat runs", num(hb.reduce((a, x) => a + x.failed, 0))),
        stat("Interruptions today", `${num(used[used.length - 1])} of ${num(budget.limit)}`),
        stat("Inbox depth now", num(inbox.depth))),
      el("p", { class: "muted", text: `The last ${d.days.length} days. The heartbeat runs every ${every}; a day's interruption budget is ${budget.limit} (days in ${budget.timezone}).` }),
      Charts.bars({ title: "Heartbeat runs per day", labels: days, series: [
        { name: "Runs", values: hb.map((x) => x.runs), cls: "s0" },
        { name: "Failed", values: hb.map((x) => x.failed), cls: "bad" }] }),
      Charts.bars({ title: `Interruption budget used per day (limit ${budget.limit})`, labels: budget.per_day.map((x) => x.day.slice(5)),
        series: [{ name: "Interruptions", values: used, cls: "s2" }] }),
      over ? el("p", { class: "reason", text: `The budget ran out on ${over} of these days: later items waited for the next brief.` }) : null,
      section("Inbox depth now", el("p", {}, `${num(inbox.depth)} item${inbox.depth === 1 ? "" : "s"} wait${inbox.depth === 1 ? "s" : ""} to be handled: `,
        INBOX_STATES.flatMap((s, i) => [i ? ", " : "", badge(s), ` ${num(inbox.counts[s] || 0)}`]), ".")),
      Charts.bars({ title: "Inbox items per day of arrival, by their state now", labels: days, stacked: true,
        series: INBOX_STATES.map((s) => ({ name: label(s), values: inbox.per_day.map((x) => x[s] || 0), cls: INBOX_COLOURS[s] })) }),
    ].filter(Boolean));
  };

  // -- the calendar as a timeline -----------------------------------------------------

  const W = 760, LANE = 26, LEFT = 150, RIGHT = 10, TOP = 24;

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  function lanes(d) {
    const out = [{ name: "Runs", kind: "runs", marks: d.runs }];
    const upcoming = new Map();
    for (const e of d.upcoming) {
      const key = e.kind === "duty" ? `${e.title}` : label(e.kind);
      if (!upcoming.has(key)) upcoming.set(key, []);
      upcoming.get(key).push(e);
    }
    for (const [name, marks] of upcoming) out.push({ name, kind: "upcoming", marks });
    if (d.due.length) out.push({ name: "Goals due", kind: "due", marks: d.due });
    return out;
  }

  function draw(d, worker) {
    const start = Date.parse(d.start), end = Date.parse(d.end), now = Date.parse(d.now);
    const rows = lanes(d);
    const H = TOP + rows.length * LANE + 8;
    const x = (t) => LEFT + ((Math.min(Math.max(t, start), end) - start) / (end - start)) * (W - LEFT - RIGHT);
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart timeline", role: "img", preserveAspectRatio: "xMidYMid meet" });
    for (let t = start - (start % 86400000) + 86400000; t < end; t += 86400000) {
      const day = new Date(t);
      chart.append(svg("line", { x1: x(t), x2: x(t), y1: TOP - 4, y2: H - 8, class: "grid-line" }),
        svg("text", { x: x(t) + 2, y: TOP - 10, class: "axis" }, `${day.getUTCMonth() + 1}/${day.getUTCDate()}`));
    }
    chart.append(svg("line", { x1: x(now), x2: x(now), y1: TOP - 14, y2: H - 4, class: "now-line" }),
      svg("text", { x: x(now) + 3, y: H - 2, class: "axis now" }, "now"));
    rows.forEach((lane, i) => {
      const y = TOP + i * LANE + LANE / 2;
      chart.append(svg("text", { x: LEFT - 6, y: y + 4, class: "axis lane", "text-anchor": "end" }, clip(lane.name, 22)));
      for (const m of lane.marks) chart.append(mark(lane.kind, m, x, y, worker, end));
    });
    const counts = `${d.runs.length} runs, ${d.upcoming.length} scheduled fires, ${d.due.length} due dates`;
    chart.setAttribute("aria-label", `Timeline from ${d.start.slice(0, 10)} to ${d.end.slice(0, 10)}: ${counts}`);
    return el("figure", { class: "chart-box" }, el("figcaption", { text: "The last 7 days and the next 7 (UTC days)" }), chart,
      el("ul", { class: "legend" }, [["s0", "Run"], ["bad", "Failed run"], ["s1", "Scheduled"], ["s2", "Due date"]].map(([c, t]) =>
        el("li", {}, el("span", { class: `swatch ${c}`, "aria-hidden": "true" }), t))));
  }

  function mark(kind, m, x, y, worker, end) {
    if (kind === "runs") {
      const from = x(Date.parse(m.start)), to = x(m.end ? Date.parse(m.end) : Date.parse(m.start));
      const failed = ["failed", "interrupted", "budget_exceeded"].includes(m.state);
      const link = svg("a", { href: `#/workers/${encodeURIComponent(worker)}/runs/${encodeURIComponent(m.run_id)}` },
        svg("rect", { x: from, y: y - 7, width: Math.max(4, to - from), height: 14, class: `bar ${failed ? "bad" : "s0"}` },
          svg("title", {}, `${label(m.source_type)} run ${m.run_id}: ${label(m.state)}, ${when(m.start)}`)));
      return link;
    }
    if (kind === "upcoming") {
      return svg("circle", { cx: x(Date.parse(m.at)), cy: y, r: 5, class: "bar s1" },
        svg("title", {}, `${m.title}: ${m.local}${m.schedule ? ` (${m.schedule})` : ""}`));
    }
    const at = Date.parse(`${m.due}T23:59:59Z`);
    const cx = x(at);
    const beyond = at > end;
    return svg("path", { d: `M${cx - 6} ${y + 6} L${cx} ${y - 7} L${cx + 6} ${y + 6} Z`, class: `bar s2${beyond ? " beyond" : ""}` },
      svg("title", {}, `${m.milestone ? `${m.milestone} · milestone ` : "Goal "}${m.title}: due ${m.due}${beyond ? " (after this window)" : ""}, ${label(m.status)}`));
  }

  PAGES.timeline = function timelinePage(d, r) {
    heading("timeline", r);
    const w = r.worker;
    const soon = d.upcoming.map((e) => [el("time", { datetime: e.at, text: e.local }), `${e.title}${e.trigger_id ? ` (${e.trigger_id})` : ""}`,
      label(e.kind), e.schedule || ""]);
    $("#view-timeline .content").replaceChildren(
      el("p", { class: "muted", text: `Times in ${d.timezone}. Each run is a link to its run view; hover or focus a mark for its details.` }),
      draw(d, w),
      section(`Coming up (${d.upcoming.length})`, soon.length ? table(["When", "What", "Kind", "Schedule"], soon, "timeline-upcoming")
        : muted("Nothing scheduled in the next days.")),
      section(`Due dates (${d.due.length})`, d.due.length ? table(["Due", "Goal or milestone", "State"], d.due.map((g) => [
        el("time", { datetime: g.due, text: g.due }), g.milestone ? `${g.title} (milestone of ${g.milestone})` : g.title, badge(g.status)]), "timeline-due")
        : muted("No goal or milestone has a due date.")),
      section(`Recent runs (${d.runs.length})`, d.runs.length ? table(["Run", "State", "Source", "Queued", "Finished"], d.runs.map((x) => [
        runLink(w, x.run_id), badge(x.state), `${label(x.source_type)}${x.duty_id ? ` (${x.duty_id})` : ""}`, when(x.start), x.end ? when(x.end) : ""]), "timeline-runs")
        : muted("No run in the last 7 days.")));
  };

  // -- memory (read-only) -------------------------------------------------------------

  const PARTITIONS = ["run", "duty", "conversation", "worker", "tenant"];

  function memoryForm(worker) {
    const form = el("form", { id: "memory-form", class: "memory-form", role: "search", onsubmit: (e) => {
      e.preventDefault();
      search.q = $("#memory-q").value.trim();
      search.partition = $("#memory-partition").value;
      load();
    } },
    el("label", { for: "memory-q", text: "Search what it remembers" }),
    el("input", { id: "memory-q", name: "q", type: "search", maxlength: 200, value: search.q }),
    el("label", { for: "memory-partition", text: "Partition" }),
    el("select", { id: "memory-partition", name: "partition" }, el("option", { value: "", text: "Every partition" }),
      PARTITIONS.map((p) => el("option", { value: p, text: label(p), selected: search.partition === p }))),
    el("button", { type: "submit" }, "Search"));
    return [el("p", { class: "muted" }, "What ", workerLink(worker), " remembers: the episodes of its runs, summaries, the " +
      "preferences and decisions it learned, and the tenant's shared memory. Read-only: memory changes through runs, " +
      "consolidation and approved candidates."), form, el("div", { id: "memory-results" })];
  }

  PAGES.memory = function memoryPage(d, r) {
    heading("memory", r);
    const host = $("#view-memory .content");
    if (!$("#memory-form") || host.dataset.worker !== r.worker || host.dataset.epoch !== String(state.epoch)) {
      host.replaceChildren(...memoryForm(r.worker));
      host.dataset.worker = r.worker;
      host.dataset.epoch = String(state.epoch);
    }
    const total = Object.values(d.counts).reduce((a, b) => a + b, 0);
    const what = `${d.matched} of ${total} entr${total === 1 ? "y" : "ies"}${d.query ? ` matching “${d.query}”` : ""}` +
      `${d.partition ? ` in the ${label(d.partition).toLowerCase()} partition` : ""}${d.matched > d.entries.length ? `; the newest ${d.entries.length} shown` : ""}.`;
    $("#memory-results").replaceChildren(...[
      el("div", { class: "stats" }, PARTITIONS.map((p) => stat(label(p), num(d.counts[p] || 0)))),
      el("p", { role: "status", class: "memory-count", text: what }),
      d.unreadable.length ? el("p", { class: "reason", text: `Files that could not be read: ${d.unreadable.join("; ")}` }) : null,
      d.entries.length ? table(["When", "Partition", "Kind", "What", "From"], d.entries.map((e) => [
        el("time", { datetime: e.created_at, text: when(e.created_at) }),
        [badge(e.partition), el("div", {}, el("code", { text: e.scope }))],
        [badge(e.type), e.status !== "active" ? badge(e.status) : null],
        [e.title ? el("strong", { text: e.title }) : null, el("div", { class: "memory-text", text: e.text }),
          e.quote ? el("q", { text: e.quote }) : null],
        [label(e.source), ...(e.run_id ? [" · run ", runLink(r.worker, e.run_id)] : []), e.duty_id ? ` · duty ${e.duty_id}` : "",
          e.recall_count ? ` · recalled ${e.recall_count}×` : ""]]), "memory-entries")
        : muted(total ? "Nothing matches this search." : "The worker remembers nothing yet."),
    ].filter(Boolean));
  };

  // -- the learned policy and the decision log -------------------------------------------

  const logView = { kind: "" };  // the decision log's filter, kept over refreshes

  function versionBadge(status) {
    const b = badge(status === "active" ? "applied" : status);
    b.textContent = VERSION_STATES[status] || label(status);
    return b;
  }
  function changes(list) {
    return list.map((c) => c.kind === "gate" ? `${c.action} → ${label(c.gate).toLowerCase()}`
      : c.kind === "budget" ? `interruption budget → ${c.value} a day` : `priority of ${c.action} ${c.value > 0 ? "+" : ""}${c.value}`).join("; ");
  }
  function decidedBy(v) { return v ? `Version ${v}` : "Steward's gate (version 0)"; }
  function pct(v) { return v === null || v === undefined ? "n/a" : `${Math.round(v * 100)}%`; }

  async function policyCommand(worker, path, body, doing) {
    say(`${doing}…`);
    const epoch = state.epoch;
    try {
      const done = await api(workerUrl({ worker }, path), { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body || {}) });
      if (epoch !== state.epoch) return;
      say(done.version ? `Policy version ${done.version} is now ${(VERSION_STATES[done.status] || label(done.status)).toLowerCase()}: ${done.changes}.`
        : "Learning from feedback again.");
    } catch (error) {
      if (epoch !== state.epoch) return;
      say(`Refused: ${error.message}`);
    }
    await load();
  }

  function versionActions(worker, v, frozen) {
    if (v.status === "shadow") {
      const waiting = Date.parse(v.shadow_until) > Date.now();
      return [el("button", { type: "button", class: "approve", disabled: waiting || frozen, "aria-label": `Apply policy version ${v.version}`,
        onclick: (e) => { e.currentTarget.disabled = true; policyCommand(worker, `/learning/versions/${v.version}/apply`, null, `Applying version ${v.version}`); } }, "Apply"),
      waiting ? el("div", { class: "muted", text: `in shadow until ${when(v.shadow_until)}` }) : null,
      frozen ? el("div", { class: "muted", text: "learning is frozen" }) : null];
    }
    if (v.status === "active") {
      return el("button", { type: "button", class: "reject", "aria-label": `Roll back policy version ${v.version}`,
        onclick: (e) => { e.currentTarget.disabled = true; policyCommand(worker, "/learning/rollback", { version: v.version }, `Rolling back version ${v.version}`); } }, "Roll back");
    }
    return "";
  }

  function logRow(worker, e) {
    const what = e.kind === "gate" ? [(e.actions || []).join(", "), " ", badge(e.gate_result)]
      : e.kind === "feedback" ? [badge(e.feedback_type), ` on ${(e.actions || []).join(", ")} `, e.gate_result ? badge(e.gate_result) : null]
        : [badge(e.step), e.version ? ` version ${e.version}` : "", e.changes ? ` · ${e.changes}` : ""];
    const shadow = (e.shadow || []).map((x) => `version ${x.version} would have: ${label(x.would_have).toLowerCase()}`).join("; ");
    const detail = [e.kind === "gate" ? (e.reasons || []).map(label).join(", ") : e.detail || "", e.by ? ` (by ${e.by})` : "",
      e.source_type ? ` · ${label(e.source_type)}${e.duty_id ? ` ${e.duty_id}` : ""}` : ""].join("");
    return [el("time", { datetime: e.at, text: when(e.at) }), badge(e.kind), e.kind === "gate" ? decidedBy(e.policy_version) : "",
      what, shadow, [detail, e.plan_id ? [" · run ", runLink(worker, e.plan_id)] : ""].flat()];
  }

  PAGES.learning = function learningPage(d, r) {
    heading("learning", r);
    const L = d.learning, w = r.worker;
    const metric = Object.fromEntries(L.metrics.map((m) => [m.metric_name, m.value]));
    const frozen = Boolean(L.frozen);
    const shown = d.decisions.filter((e) => !logView.kind || e.kind === logView.kind);
    const filter = el("select", { id: "learning-kind", onchange: (e) => { logView.kind = e.target.value; load(); } },
      [["", "Every entry"], ["gate", "Gate decisions"], ["feedback", "Feedback"], ["policy", "Policy steps"]].map(([v, t]) =>
        el("option", { value: v, text: t, selected: logView.kind === v })));
    const versions = [...L.versions].reverse();
    $("#view-learning .content").replaceChildren(...[
      el("p", {}, "Deciding now: ", el("strong", { text: decidedBy(L.policy_version) }), ` · learning ${L.enabled ? "on" : "off"} (${label(L.mode).toLowerCase()}: a person applies every change)`),
      frozen ? el("div", { class: "failure", role: "note" }, el("strong", { text: "Learning is frozen: " }), `${L.frozen.reason} (since ${when(L.frozen.at)}) `,
        el("button", { type: "button", onclick: () => policyCommand(w, "/learning/unfreeze", null, "Unfreezing") }, "Unfreeze")) : null,
      el("div", { class: "stats" }, stat("Gate pass rate", pct(metric.gate_pass_rate)), stat("Rolled back by a person", pct(metric.rollback_rate)),
        stat("Runs that completed", pct(metric.action_success_rate)), stat("Asked a person", pct(metric.gate_result_confirm))),
      section(`Policy versions (${versions.length})`, versions.length ? table(["Version", "State", "Changes", "Learned from", "Shadow until", "Applied or ended", ""],
        versions.map((v) => [`Version ${v.version}`, versionBadge(v.status), changes(v.changes), `${v.evidence.length} feedback event${v.evidence.length === 1 ? "" : "s"}`,
          when(v.shadow_until), v.applied_at || v.ended_at ? `${when(v.ended_at || v.applied_at)}${v.ended_by || v.applied_by ? ` by ${v.ended_by || v.applied_by}` : ""}` : "",
          versionActions(w, v, frozen)]), "policy-versions") : muted("Nothing learned yet: Steward's gate decides alone.")),
      section("Decision log", el("p", {}, el("label", { for: "learning-kind", text: "Show " }), filter, ` ${shown.length} of ${d.decisions.length} entries, newest first.`),
        shown.length ? table(["When", "Entry", "Decided by", "What", "Shadow versions", "Why"], shown.map((e) => logRow(w, e)), "decision-log")
          : muted("No entry yet.")),
      section(`Conflict cases (${d.conflicts.length})`, d.conflicts.length ? table(["When", "State", "Type", "Resource", "Plans", "Resolution", "Detail"],
        d.conflicts.map((c) => [when(c.created_at), badge(c.status), badge(c.conflict_type), el("code", { text: c.resource_key || "—" }),
          `${c.worker_a_id || "?"}: ${c.operation_a || c.plan_a_id} · then ${c.worker_b_id || "?"}: ${c.operation_b || c.plan_b_id}${c.irreversible ? " (irreversible)" : ""}`,
          [badge(c.resolution), c.decision ? ` ${c.decision}${c.decided_by ? ` by ${c.decided_by}` : ""}` : ""], c.detail]), "conflicts")
        : muted("No conflict with another plan.")),
    ].filter(Boolean));
  };

  // -- supervision ----------------------------------------------------------------------

  const SUPERVISOR_STATES = ["attention_required", "paused", "observing", "resolved", "inactive"];

  async function resolveSupervision(worker, runId, button) {
    button.disabled = true;
    say("Marking the run as looked at…");
    const epoch = state.epoch;
    try {
      await api(workerUrl({ worker }, `/runs/${encodeURIComponent(runId)}/supervision/resolve`), { method: "POST" });
      if (epoch === state.epoch) say(`The supervisor's notes on ${runId} are marked as looked at.`);
    } catch (error) {
      if (epoch === state.epoch) { say(`Could not mark it: ${error.message}`); button.disabled = false; }
    }
    await load();
  }

  function policyText(p) {
    const a = p.attach || {};
    const to = a.all ? ["every run"] : [...(a.conversations || []).map((x) => `conversation ${x}`),
      ...(a.duties || []).map((x) => `duty ${x}`), ...(a.experiments || []).map((x) => `experiment ${x}`)];
    const budgets = Object.entries(p.budgets || {}).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => `${label(k).toLowerCase()} ${num(v)}`);
    return [to.length ? to.join(", ") : "nothing (not attached)", p.tools && p.tools.length ? `tools ${p.tools.join(", ")}` : "any tool",
      budgets.length ? budgets.join(", ") : "no budget", `on a violation: ${label(p.on_violation).toLowerCase()}; on a budget: ${label(p.on_budget).toLowerCase()}`,
      p.model && p.model.enabled ? `model review on ${(p.model.events || []).join(", ")}` : "no model review"];
  }

  PAGES.supervision = function supervisionPage(d, r) {
    heading("supervision", r);
    const w = r.worker;
    const look = d.records.filter((x) => x.state === "attention_required" || x.state === "paused");
    $("#view-supervision .content").replaceChildren(...[
      el("p", { class: "muted" }, "Supervisor policies watch runs and may warn, ask for a review, pause or stop them ",
        "(policies are files under ", el("code", { text: "supervisors/" }), "). The newest records the supervisor kept with runs are below."),
      el("div", { class: "stats" }, SUPERVISOR_STATES.map((s) => stat(label(s), num(d.counts[s] || 0)))),
      section(`Policies (${d.policies.length})`, d.policies.length ? table(["File", "Watches", "Tools", "Budgets", "Actions", "Model"],
        d.policies.map((p) => p.error ? [el("code", { text: p.file }), el("span", { class: "reason", text: `Cannot be used: ${p.error}` }), "", "", "", ""]
          : [el("code", { text: p.file }), ...policyText(p.policy)]), "supervisor-policies") : muted("No supervisor policy: runs are not supervised.")),
      d.unreadable.length ? el("p", { class: "reason", text: `Records that could not be read: ${d.unreadable.join("; ")}` }) : null,
      section(`Needs a look (${look.length})`, look.length ? recordsTable(w, look, true) : muted("Nothing waits for a person.")),
      section(`Supervised runs (${d.records.length})`, d.records.length ? recordsTable(w, d.records, false) : muted("No run has been supervised yet.")),
    ].filter(Boolean));
  };

  function recordsTable(worker, records, actions) {
    return table(["Run", "State", "Policies", "Decisions", "Model review", ""], records.map((x) => [
      runLink(worker, x.run_id), badge(x.state), (x.policies || []).join(", "),
      x.decisions && x.decisions.length ? el("ul", {}, x.decisions.map((dn) => el("li", {}, badge(dn.action), ` ${label(dn.check)}: ${dn.reason}`,
        dn.policy ? el("span", { class: "muted", text: ` (${dn.policy})` }) : null))) : "no decision",
      x.model_review && x.model_review.calls ? `${x.model_review.calls} call${x.model_review.calls === 1 ? "" : "s"}, ${ms(x.model_review.ms)}` : "",
      actions && x.state !== "resolved" ? el("button", { type: "button", class: "approve", "aria-label": `Mark as looked at: ${x.run_id}`,
        onclick: (e) => resolveSupervision(worker, x.run_id, e.currentTarget) }, "Mark as looked at") : ""]), actions ? "supervision-attention" : "supervision-records");
  }

  // -- context spaces -------------------------------------------------------------------

  const SPACE_STATES = ["active", "dormant", "parked", "archived"];
  const facts = { key: "", events: new Map() };  // a space's facts, loaded when opened, kept over refreshes

  function spaceFacts(worker, card) {
    const key = `${state.epoch}/${worker}`;
    if (facts.key !== key) Object.assign(facts, { key, events: new Map() });
    const body = el("div", { class: "space-facts" });
    const show = (events) => body.replaceChildren(events.length ? el("ul", {}, events.map((e) => el("li", {},
      el("time", { datetime: e.occurred_at, text: when(e.occurred_at) }), ` ${label(e.source)}${e.actor ? ` · ${e.actor}` : ""}: ${clip(e.summary, 300)} `,
      e.actionable ? badge("actionable") : null))) : muted("No fact kept."));
    if (facts.events.has(card.space_id)) show(facts.events.get(card.space_id));
    const details = el("details", { class: "space", "data-space": card.space_id, ontoggle: async (ev) => {
      if (!ev.currentTarget.open || facts.events.has(card.space_id)) return;
      body.replaceChildren(muted("Loading…"));
      try {
        const found = await api(workerUrl({ worker }, `/spaces/${encodeURIComponent(card.space_id)}/events`));
        if (facts.key !== key) return;
        facts.events.set(card.space_id, found.events);
        show(found.events);
      } catch (error) { body.replaceChildren(el("p", { class: "reason", text: `Could not load its facts: ${error.message}` })); }
    } }, el("summary", { text: `Facts (${card.evidence_count})` }), body);
    return details;
  }

  async function confirmSpace(worker, card, button) {  // a pending NEW becomes a space of its own
    button.disabled = true;
    const epoch = state.epoch;
    try {
      await api(workerUrl({ worker }, `/spaces/${encodeURIComponent(card.space_id)}/confirm`), { method: "POST" });
      if (epoch === state.epoch) say(`${card.space_id} is confirmed as a space of its own.`);
    } catch (error) {
      if (epoch === state.epoch) { say(`Could not confirm ${card.space_id}: ${error.message}`); button.disabled = false; }
    }
    await load();
  }

  function spaceRows(worker, cards) {
    return table(["Space", "State", "Evidence", "Linked tasks", "Last active", "Facts"], cards.map((c) => [
      [el("strong", { text: c.title || c.space_id }), " ", el("code", { text: c.space_id }), c.is_pinned ? [" ", badge("pinned")] : null,
        c.review !== "confirmed" ? [" ", badge(c.review)] : null, c.due_at ? el("div", { class: "muted", text: `due ${when(c.due_at)}` }) : null,
        c.route_reason ? el("div", { class: "muted", text: clip(c.route_reason, 160) }) : null,
        c.review === "pending" ? el("div", { class: "actions" }, el("button", { type: "button", class: "approve",
          "aria-label": `Confirm: ${c.title || c.space_id}`, onclick: (e) => confirmSpace(worker, c, e.currentTarget) }, "Confirm")) : null].flat(),
      badge(c.state), `${c.evidence_count} fact${c.evidence_count === 1 ? "" : "s"}${c.sources.length ? ` from ${c.sources.map(label).join(", ")}` : ""}`,
      c.tasks.length ? el("ul", {}, c.tasks.map((t) => el("li", {}, `${t.task_id} (priority ${t.priority})`, t.run_id ? [" ", runLink(worker, t.run_id)] : null)))
        : "none",
      when(c.last_active_at), spaceFacts(worker, c)]), "spaces");
  }

  function spaceCounts(counts) {
    return el("div", { class: "stats" }, [...SPACE_STATES, "merged"].map((s) => stat(label(s), num(counts[s] || 0))));
  }

  PAGES.spaces = function spacesPage(d, r) {
    heading("spaces", r);
    const w = r.worker;
    const pending = d.spaces.filter((c) => c.review === "pending");
    const live = d.spaces.filter((c) => c.review !== "pending" && c.review !== "merged");
    $("#view-spaces .content").replaceChildren(
      el("p", { class: "muted" }, "Context spaces gather the facts the worker senses by topic, with their evidence and the tasks they led to ",
        "(on when the worker's ", el("code", { text: "context_spaces.enabled" }), " is true)."),
      spaceCounts(d.counts),
      section(`New, waiting for a person (${pending.length})`, pending.length ? spaceRows(w, pending) : muted("No new space waits to be confirmed.")),
      ...SPACE_STATES.map((s) => {
        const cards = live.filter((c) => c.state === s);
        return section(`${label(s)} (${cards.length})`, cards.length ? spaceRows(w, cards) : muted("None."));
      }));
  };

  // The worker page's spaces block (the aggregator's `spaces`): counts, pending, the most recently active.
  const block = el("section", { class: "block wide", "data-block": "spaces", "aria-labelledby": "h-spaces" },
    el("h2", { id: "h-spaces", text: "Context spaces" }), el("div", { class: "body" }));
  $('#view-worker [data-block="decisions"]').after(block);
  RENDERERS.spaces = function spacesBlock(data) {
    const w = state.worker;
    const link = el("p", {}, el("a", { href: `#/workers/${encodeURIComponent(w)}/spaces`, text: "Every space, with its facts" }));
    if (!data.enabled && !data.spaces.length && !data.pending.length) return [muted("Context spaces are off for this worker."), link];
    const recent = data.spaces.slice(0, 5).map((c) => el("li", {}, el("strong", { text: c.title || c.space_id }), " ", badge(c.state),
      ` ${c.evidence_count} fact${c.evidence_count === 1 ? "" : "s"}, ${c.tasks.length} task${c.tasks.length === 1 ? "" : "s"}, active ${when(c.last_active_at)}`));
    return [spaceCounts(data.counts),
      data.pending.length ? el("p", { class: "reason", text: `${data.pending.length} new space${data.pending.length === 1 ? " waits" : "s wait"} to be confirmed.` }) : null,
      recent.length ? el("ul", {}, recent) : muted("No space yet."), link].filter(Boolean);
  };
})();
