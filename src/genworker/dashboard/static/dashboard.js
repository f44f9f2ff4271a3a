// genworker console: plain DOM, no build step, no third-party code. Pages are hash routes (#/, #/usage,
// #/health, #/workers/{w}, #/workers/{w}/usage, #/workers/{w}/runs/{run}, #/workers/{w}/edit in editor.js,
// #/workers/{w}/playground in playground.js); each reads one tenant-scoped JSON route. Every text goes
// through textContent (never innerHTML).
"use strict";

// `epoch` changes at every log in and log out: a response that arrives later for an older session
// is dropped, so one tenant's data never shows in another's session (or after logging out).
const state = {
  csrf: null, worker: null, workers: [], refreshS: 15, timer: null, loading: null, again: false, epoch: 0,
};

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Readable words for every state and enum value the API sends; anything else is humanised.
const LABELS = {
  queued: "Queued", running: "Running", waiting_approval: "Waiting for approval", paused: "Paused",
  evaluating: "Evaluating", completed: "Completed", failed: "Failed", cancelled: "Cancelled",
  interrupted: "Interrupted", budget_exceeded: "Budget exceeded", superseded: "Replaced",
  met: "Goal met", not_met: "Goal not met", inconclusive: "Inconclusive", not_applicable: "No goal",
  on_track: "On track", at_risk: "At risk", off_track: "Off track", overdue: "Overdue",
  pending: "Pending", in_progress: "In progress", done: "Done", blocked: "Blocked", active: "Active",
  achieved: "Achieved", abandoned: "Abandoned", missing_credentials: "Missing credentials",
  not_started: "Not started", ready: "Ready", starting: "Starting", degraded: "Degraded", stopped: "Stopped",
  connected: "Connected", disconnected: "Disconnected", configured: "Configured",
  sending: "Being sent", retrying: "Will retry", given_up: "Given up", outcome_unknown: "Outcome unknown",
  delivered: "Delivered", "not delivered": "Not delivered",
  auto: "Automatic", gated: "Needs approval", allow: "Allowed", deny: "Denied", ask: "Asked a person",
  reject: "Rejected", rejected: "Rejected", approved: "Approved", denied: "Denied", needs_approval: "Needs approval",
  quick: "Quick", standard: "Standard", deep: "Deep", low: "Low risk", medium: "Medium risk", high: "High risk",
  critical: "Critical risk", read: "Reads", write: "Writes", external: "External effect", none: "No effect",
  ok: "OK", not_loaded: "Not loaded", reload_refused: "Reload refused", loaded: "Loaded",
  tenant_not_loaded: "Tenant not loaded", error: "Error", warning: "Warning", info: "Note",
  pass: "Passed", fail: "Failed", passed: "Passed",
};
function label(value) {
  if (value === null || value === undefined || value === "") return "";
  const text = String(value);
  if (LABELS[text]) return LABELS[text];
  const words = text.replace(/[_-]+/g, " ").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}
function badge(value) {
  const key = String(value);
  return el("span", { class: `badge ${key.replace(/[^a-z0-9_]/gi, "_")}`, "data-value": key, text: label(key) });
}
// At most `n` characters, cut at a word boundary (never mid-word), with an ellipsis when cut.
function clip(text, n) {
  const t = String(text || "");
  if (t.length <= n) return t;
  const cut = t.slice(0, n + 1);
  const space = cut.search(/\s\S*$/);
  return `${(space > n * 0.5 ? cut.slice(0, space) : t.slice(0, n)).trimEnd()}…`;
}
function num(n) { return n === null || n === undefined ? "n/a" : Number(n).toLocaleString("en-US"); }
function money(n) { return n === null || n === undefined ? "n/a" : `$${Number(n).toFixed(n < 0.01 && n > 0 ? 6 : 4)}`; }
function ms(n) { return n === null || n === undefined ? "n/a" : n >= 1000 ? `${(n / 1000).toFixed(2)} s` : `${Math.round(n)} ms`; }
function runLink(worker, runId) {
  return el("a", { href: `#/workers/${encodeURIComponent(worker)}/runs/${encodeURIComponent(runId)}`,
    class: "run-link", title: `Open run ${runId}` }, el("code", { text: runId }));
}
function workerLink(worker, text) {
  return el("a", { href: `#/workers/${encodeURIComponent(worker)}` }, text || worker);
}
function muted(text) { return el("p", { class: "muted", text }); }
function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}
function say(text) { $("#status").textContent = text; }
function longConnection(lc) {  // a binding's long connection: reconnects, last event, why it is down
  return ` · ${lc.reconnects} reconnects · last event ${lc.last_event_at ? when(lc.last_event_at) : "none"}` +
    (lc.error ? ` · ${lc.error}` : "") + (lc.holder ? ` · held by ${lc.holder}` : "");
}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  if (options.method && options.method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, { credentials: "same-origin", ...options, headers });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) {
    const message = body && body.error ? body.error.message : `HTTP ${response.status}`;
    const error = new Error(message);
    error.status = response.status;
    error.body = body;
    throw error;
  }
  return body;
}

// -- session ---------------------------------------------------------------------

async function start() {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  $("#refresh").addEventListener("click", () => load());
  $("#skip").addEventListener("click", (e) => { e.preventDefault(); $("#main").focus(); });  // keeps the page's address
  $("#worker").addEventListener("change", (e) => {
    if (e.target.value) location.hash = `#/workers/${encodeURIComponent(e.target.value)}`;
  });
  window.addEventListener("hashchange", () => { if (state.csrf) { showRoute(); load(); } });
  if (new URLSearchParams(location.search).get("login") === "failed") {
    $("#login-error").textContent = "That API key is invalid or revoked.";
  }
  let session;
  try {
    session = await api("/dashboard/session");
  } catch (error) {
    showLogin();
    return;
  }
  showDashboard(session);
}

function forget() {
  state.epoch += 1;
  clearInterval(state.timer);
  state.csrf = null;
  state.worker = null;
  state.workers = [];
  $("#session").hidden = true;
  $("#main").hidden = true;
  $("#skip").hidden = true;
  $("#tenant").textContent = "";
  $("#worker").replaceChildren();
  $("#updated").textContent = "";
  $("#crumbs").replaceChildren();
  delete document.body.dataset.loaded;
  delete document.body.dataset.page;
  for (const host of document.querySelectorAll("[data-block]")) {
    host.querySelector(":scope > .body").replaceChildren();
    delete host.dataset.status;
    host.classList.remove("degraded");
  }
  for (const view of document.querySelectorAll("[data-view]")) {
    view.hidden = true;
    const content = view.querySelector(".content");
    if (content) content.replaceChildren();
  }
  $("#view-worker .worker-head .content").replaceChildren();
  $("#h-worker").textContent = "Worker page";
  $("#h-usage").textContent = "Usage";
  $("#h-run").textContent = "Run";
  $('[data-block="load_errors"]').hidden = true;
  document.dispatchEvent(new Event("console:forget"));  // pages that keep their own state drop it (playground.js)
}

function showLogin(message = "") {
  forget();
  say(message);
  $("#login").hidden = false;
  $("#api-key").focus();
}

function showDashboard(session) {
  forget();
  state.csrf = session.csrf_token;
  state.refreshS = session.refresh_s || 15;
  state.workers = session.workers;
  $("#login").hidden = true;
  $("#session").hidden = false;
  $("#main").hidden = false;
  $("#skip").hidden = false;
  $("#tenant").textContent = `Tenant ${session.tenant_id}`;
  const select = $("#worker");
  select.replaceChildren(el("option", { value: "", text: "Choose a worker…" }),
    ...session.workers.map((w) => el("option", { value: w, text: w })));
  if (!session.workers.length) say("This key may not use any worker of the tenant.");
  showRoute();
  load();
  clearInterval(state.timer);
  state.timer = setInterval(() => { if (!document.hidden) load(); }, state.refreshS * 1000);
}

async function login(event) {
  event.preventDefault();
  const key = $("#api-key").value.trim();
  $("#login-error").textContent = "";
  try {
    await api("/dashboard/login", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ api_key: key }),
    });
  } catch (error) {
    $("#login-error").textContent = error.status === 401 ? "That API key is invalid or revoked." : error.message;
    $("#api-key").focus();
    return;
  }
  $("#api-key").value = "";
  showDashboard(await api("/dashboard/session"));
  $("#main").focus();
}

async function logout() {
  forget();  // nothing of this tenant stays on screen, even while the request is on its way
  history.replaceState(null, "", location.pathname);  // the next session starts at the overview
  say("Logging out…");
  await api("/dashboard/logout", { method: "POST" }).catch(() => null);
  showLogin("Logged out.");
}

// -- routes ----------------------------------------------------------------------

// A worker's page that another script adds (pages.js): name -> {title, source(r): a path, or a function
// that loads the page's data}.
const WORKER_PAGES = {};

// #/ | #/usage | #/health | #/workers/{w} | #/workers/{w}/usage | #/workers/{w}/runs/{run}
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (!parts.length || (parts.length === 1 && parts[0] === "overview")) return { view: "overview" };
  if (parts.length === 1 && parts[0] === "usage") return { view: "usage" };
  if (parts.length === 1 && parts[0] === "health") return { view: "health" };
  if (parts[0] === "workers" && parts.length === 2) return { view: "worker", worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 3 && parts[2] === "usage") return { view: "usage", worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 3 && parts[2] === "channels") return { view: "channels", worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 3 && parts[2] === "edit") return { view: "edit", worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 3 && parts[2] === "playground") return { view: "playground", worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 4 && parts[2] === "runs") return { view: "run", worker: parts[1], run: parts[3] };
  if (parts[0] === "workers" && parts.length === 3 && WORKER_PAGES[parts[2]]) return { view: parts[2], worker: parts[1] };
  if (parts[0] === "workers" && parts.length === 4 && WORKER_PAGES[parts[2]] && WORKER_PAGES[parts[2]].items) {
    return { view: parts[2], worker: parts[1], item: parts[3] };  // one item of a page (experiments.js)
  }
  return { view: "missing" };
}

function showRoute() {
  const r = route();
  state.worker = r.worker || null;
  let shown = r.view;
  if (r.worker && !state.workers.includes(r.worker)) shown = "missing";
  for (const view of document.querySelectorAll("[data-view]")) view.hidden = view.dataset.view !== shown;
  document.body.dataset.page = shown;
  $("#worker").value = r.worker && state.workers.includes(r.worker) ? r.worker : "";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === r.view && !r.worker) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const crumbs = [el("a", { href: "#/" }, "Overview")];
  if (r.worker) crumbs.push(workerLink(r.worker));
  if (r.view === "run") crumbs.push(el("span", { text: "Run" }));
  if (r.view === "usage") crumbs.push(el("span", { text: "Usage" }));
  if (r.view === "channels") crumbs.push(el("span", { text: "Channels" }));
  if (r.view === "health") crumbs.push(el("span", { text: "Workspace health" }));
  if (r.view === "edit") crumbs.push(el("span", { text: "Edit files" }));
  if (r.view === "playground") crumbs.push(el("span", { text: "Playground" }));
  if (WORKER_PAGES[r.view]) crumbs.push(el("span", { text: WORKER_PAGES[r.view].title }));
  $("#crumbs").replaceChildren(...crumbs.flatMap((c, i) => (i ? [" › ", c] : [c])));
  if (shown === "missing") {
    const why = r.worker ? `This key may not use a worker named “${r.worker}”, or it does not exist.`
      : `There is no page at ${location.hash}.`;
    $("#view-missing .content").replaceChildren(el("p", { text: why }), el("p", {}, el("a", { href: "#/" }, "Go to the overview")));
  }
}

// -- loading ---------------------------------------------------------------------

function view() { return `${state.epoch}/${location.hash}`; }

function source(r) {
  const w = r.worker ? encodeURIComponent(r.worker) : "";
  switch (r.view) {
    case "overview": return "/api/v1/dashboard/overview";
    case "health": return "/api/v1/dashboard/health";
    case "usage": return `/api/v1/dashboard/usage?days=14${w ? `&worker_id=${w}` : ""}`;
    case "worker": return `/api/v1/workers/${w}/dashboard`;
    case "channels": return `/api/v1/workers/${w}/im-config/status`;
    case "run": return `/api/v1/workers/${w}/dashboard/runs/${encodeURIComponent(r.run)}`;
    case "edit": return `/api/v1/workers/${w}/files`;
    case "playground": return `/api/v1/workers/${w}/confirmations?status=pending`;
    default: return WORKER_PAGES[r.view] ? WORKER_PAGES[r.view].source(r) : null;
  }
}

async function load() {
  const current = view();
  const r = route();
  if (!state.csrf) return;
  if (document.body.dataset.page === "missing") { document.body.dataset.loaded = new Date().toISOString(); return; }
  const path = source(r);
  if (!path) return;
  if (state.loading === current) { state.again = true; return; }  // once this one is in, load again
  state.loading = current;
  state.again = false;
  try {
    const data = typeof path === "function" ? await path() : await api(path);
    if (view() !== current) return;  // logged out, or another page chosen, meanwhile
    const details = () => [...document.querySelectorAll(`#view-${r.view} details`)];
    const open = details().map((d) => d.open);  // a refresh keeps what the reader opened
    PAGES[r.view](data, r);
    const now = details();
    if (now.length === open.length) now.forEach((d, i) => { d.open = open[i]; });
    const at = data.generated_at ? new Date(data.generated_at) : new Date();
    $("#updated").textContent = `Updated ${at.toLocaleTimeString()}`;
    document.body.dataset.loaded = at.toISOString() + Math.random().toString(36).slice(2, 6);
  } catch (error) {
    if (view() !== current) return;
    if (error.status === 401) { showLogin(); return; }
    const target = r.view === "worker" ? null : $(`#view-${r.view} .content`);
    const message = error.status === 404 ? `Not found: ${error.message}` : `Could not load this page: ${error.message}`;
    if (target) target.replaceChildren(el("p", { class: "reason", text: message }));
    say(message);
    document.body.dataset.loaded = new Date().toISOString();
  } finally {
    if (state.loading === current) {
      state.loading = null;
      if (state.again) load();
    }
  }
}

function render(name, block) {
  const host = document.querySelector(`[data-block="${name}"]`);
  if (!host) return;
  const body = host.querySelector(":scope > .body");
  host.dataset.status = block.status;
  host.classList.toggle("degraded", block.status !== "ok");
  if (name === "load_errors") host.hidden = block.status === "ok" && !block.data.problems.length;
  if (block.status !== "ok") {
    const text = { unavailable: "Unavailable", timeout: "Timed out", error: "Failed" }[block.status] || label(block.status);
    body.replaceChildren(el("p", { class: "reason" }, el("strong", { text: `${text}: ` }), block.reason || ""));
    return;
  }
  const renderer = RENDERERS[name];
  body.replaceChildren(...[].concat(renderer ? renderer(block.data) : el("pre", { text: JSON.stringify(block.data, null, 2) })));
}

// -- actions ---------------------------------------------------------------------

async function decide(kind, id, decision, button) {
  const row = button.closest(".item");
  row.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  say(`${decision === "approve" ? "Approving" : "Rejecting"} ${kind}…`);
  const epoch = state.epoch;
  const base = `/api/v1/workers/${encodeURIComponent(state.worker)}`;
  const path = kind === "confirmation"
    ? `${base}/confirmations/${encodeURIComponent(id)}/${decision}`
    : `${base}/dashboard/suggestions/${encodeURIComponent(id)}/${decision}`;
  try {
    const result = await api(path, { method: "POST" });
    if (epoch !== state.epoch) return;  // logged out meanwhile: its outcome is not shown to the next session
    const run = result && result.run;
    say(run ? `Approved; the task ran: ${run.state}${result.output ? ` — ${result.output}` : ""}`
            : `${decision === "approve" ? "Approved" : "Rejected"}.`);
  } catch (error) {
    if (epoch !== state.epoch) return;
    say(`Could not ${decision}: ${error.message}`);
    row.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
  await load();
}

async function resend(id, button) {
  const row = button.closest(".item");
  button.disabled = true;
  say("Sending the message again…");
  const epoch = state.epoch;
  const path = `/api/v1/workers/${encodeURIComponent(state.worker)}/outbox/${encodeURIComponent(id)}/resend`;
  try {
    const result = await api(path, { method: "POST" });
    if (epoch !== state.epoch) return;
    const entry = result.entry;
    say(result.delivered ? `Delivered to ${entry.delivered_to}.`
                         : `Not delivered (${entry.state}): ${entry.last_error || "no recipient took it"}`);
  } catch (error) {
    if (epoch !== state.epoch) return;
    say(`Could not resend: ${error.message}`);
    if (row.isConnected) button.disabled = false;
  }
  await load();
}

function decisionButtons(kind, id, label) {
  return el("div", { class: "actions" },
    el("button", { type: "button", class: "approve", "aria-label": `Approve: ${label}`,
                   onclick: (e) => decide(kind, id, "approve", e.currentTarget) }, "Approve"),
    el("button", { type: "button", class: "reject", "aria-label": `Reject: ${label}`,
                   onclick: (e) => decide(kind, id, "reject", e.currentTarget) }, "Reject"));
}

// -- blocks ----------------------------------------------------------------------

// On a narrow screen each row becomes a card: every cell is labelled with its column (data-label).
function table(headers, rows, cls) {
  return el("div", { class: "table-wrap" }, el("table", { class: `responsive ${cls || ""}` },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c, i) => el("td", { "data-label": headers[i] }, el("div", { class: "cell" }, c))))))));
}

function provenance(p) {
  return Object.entries(p || {}).map(([k, v]) => `${label(k)}: ${k === "source_type" ? label(v) : v}`).join(" · ");
}

const RENDERERS = {
  load_errors(data) {
    return [...data.problems.map((p) => el("div", { class: "item", "data-worker": p.worker_id || "" },
      el("p", {}, el("strong", { text: p.worker_id ? `Worker ${p.worker_id}` : "Tenant files" }), ": ",
        el("span", { class: "serving", text: p.serving === "last_good"
          ? "a reload was refused; the last good version is still serving."
          : "did not load; nothing serves this worker." })),
      el("ul", {}, p.errors.map((e) => el("li", {},
        el("code", { text: e.line ? `${e.file}, line ${e.line}` : e.file }), ` ${e.field ? `${e.field}: ` : ""}${e.message}`))))),
      muted("Fix the file: once it loads (hot reload on save, or POST /api/v1/worker/ops/reload) this notice goes away.")];
  },
  workers(list) {
    if (!list.length) return muted("No workers.");
    return el("ul", {}, list.map((w) => el("li", {},
      w.loaded ? workerLink(w.worker_id, el("strong", { text: w.name })) : el("strong", { text: w.name }),
      ` (${w.worker_id}) ${w.role || ""} `, w.loaded ? badge(w.mode) : badge("not_loaded"))));
  },
  profile(p) {
    const rows = [["Name", p.name], ["Role", p.role], ["Department", p.department], ["Mode", label(p.mode)],
      ["Time zone", p.timezone], ["Duties", p.duties], ["Goals", p.goals], ["Skills", p.skills], ["Contacts", p.contacts]];
    return [el("dl", {}, rows.filter(([, v]) => v !== "" && v !== null).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })])),
      ...(p.warnings || []).map((w) => el("p", { class: "reason", text: w }))];
  },
  pending(data) {
    if (!data.confirmations.length) return muted("Nothing waits for a decision.");
    return data.confirmations.map((c) => el("div", { class: "item", "data-confirmation": c.id },
      el("div", {}, el("strong", { text: c.text })),
      el("div", { class: "muted", text: `asked ${when(c.created_at)}${c.reasons.length ? " · " + c.reasons.join("; ") : ""}` }),
      decisionButtons("confirmation", c.id, c.text)));
  },
  suggestions(data) {
    const items = data.suggestions || [];
    if (!items.length) return muted("No suggestions.");
    return items.map((s) => {
      const id = s.id || s.suggestion_id;
      const title = s.title || s.text || id;
      return el("div", { class: "item", "data-suggestion": id },
        el("div", {}, el("strong", { text: title }), s.kind ? badge(s.kind) : null),
        decisionButtons("suggestion", id, title));
    });
  },
  outbox(data) {
    if (!data.entries.length) return muted("Every message has been delivered.");
    const next = { sending: "being sent now", retrying: "sent again automatically" };
    return data.entries.map((e) => {
      const to = e.to.join(", ");
      const origin = [e.origin.tool || label(e.origin.kind)].filter(Boolean).join(" · ");
      return el("div", { class: "item", "data-outbox": e.id },
        el("div", {}, el("strong", { text: `To ${to}` }), badge(e.state), e.subject ? ` ${e.subject}` : ""),
        el("q", { text: clip(e.text, 200) }),
        el("div", { class: "muted" }, [e.attempts ? `${e.attempts} failed attempt${e.attempts > 1 ? "s" : ""}` : "", e.last_error, origin,
          `since ${when(e.created_at)}`, e.resent_by ? `re-sent by ${e.resent_by}` : ""].filter(Boolean).join(" · "),
          e.origin.run_id ? [" · run ", runLink(state.worker, e.origin.run_id)] : null),
        e.resendable
          ? el("div", { class: "actions" }, el("button", { type: "button", class: "resend",
              "aria-label": `Resend: to ${to}`, onclick: (ev) => resend(e.id, ev.currentTarget) }, "Resend"))
          : el("div", { class: "muted", text: e.next_attempt_at
              ? `${next[e.state]} at ${when(e.next_attempt_at)}` : next[e.state] || "" }));
    });
  },
  tasks(data) {
    const section = (title, list) => [el("h3", { text: `${title} (${list.length})` }),
      list.length ? table(["Run", "State", "Provenance", "Queued"], list.map((t) => [
        runLink(state.worker, t.run_id), [badge(t.state), t.reason ? el("div", { class: "reason", text: t.reason }) : null],
        provenance(t.provenance), when(t.queued_at)])) : muted("None.")];
    return [...section("Active", data.active), ...section("Done", data.done), ...section("Failed", data.failed),
      ...section("Cancelled or replaced", data.ended)];
  },
  calendar(data) {
    if (!data.entries.length) return muted(`Nothing scheduled in the next ${data.window_days} days.`);
    return [el("p", { class: "muted", text: `Times in ${data.timezone}` }),
      table(["When", "What", "Schedule"], data.entries.map((e) => [
        el("time", { datetime: e.at, text: e.local }),
        `${e.title}${e.trigger_id ? ` (${e.trigger_id})` : ""}`, e.schedule]))];
  },
  goals(list) {
    if (!list.length) return muted("No goals.");
    return list.map((g) => el("div", { class: "item" },
      el("div", {}, el("strong", { text: g.title }), badge(g.status), badge(`priority_${g.priority}`), badge(g.health)),
      el("div", { class: "muted", text: `${g.progress.done}/${g.progress.total} tasks done${g.deadline ? ` · due ${g.deadline}` : ""}` }),
      el("ul", {}, g.milestones.map((m) => el("li", {}, `${m.title} `, badge(m.status),
        el("ul", {}, m.tasks.map((t) => el("li", {}, `${t.title} `, badge(t.status))))))),
      g.blocked_tasks.length ? el("div", {}, el("h3", { text: "Blocked" }), el("ul", {}, g.blocked_tasks.map((t) =>
        el("li", { text: `${t.title}${t.waiting_on.length ? ` — waits on ${t.waiting_on.join(", ")}` : ""}` })))) : null,
      g.last_verdict ? el("div", {}, el("h3", {}, "Last verdict ", badge(g.last_verdict.goal_status)),
        el("div", { class: "muted" }, "run ", runLink(state.worker, g.last_verdict.run_id),
          `${g.last_verdict.task_id ? ` · task ${g.last_verdict.task_id}` : ""} · ${when(g.last_verdict.evaluated_at)}`),
        el("ul", {}, g.last_verdict.reasons.map((r) => el("li", { text: r })))) : null));
  },
  activity(list) {
    if (!list.length) return muted("No activity yet.");
    return el("ul", {}, list.map((a) => el("li", {}, el("time", { datetime: a.at, text: when(a.at) }), ` ${a.text} `,
      a.run_id ? el("a", { href: `#/workers/${encodeURIComponent(state.worker)}/runs/${encodeURIComponent(a.run_id)}`, text: "open run" }) : null)));
  },
  runs(data) {
    const t = data.totals;
    const cost = t.cost_usd === null ? "n/a" : `$${t.cost_usd}`;
    return [el("p", { class: "muted", text: `${t.runs} runs · ${t.model_calls} model calls · ${t.tokens} tokens · cost ${cost}` }),
      data.runs.length ? table(["Run", "State", "Model usage", "Tool calls", "Deliverables"], data.runs.map((r) => [
        runLink(state.worker, r.run_id), [badge(r.state), r.execution_depth ? badge(r.execution_depth) : null,
          r.reason ? el("div", { class: "reason", text: r.reason }) : null],
        r.model_usage.length ? r.model_usage.map((u) => u.error ? `${u.model || label(u.tier)}: failed (${u.error})`
          : `${u.model} ${num(u.tokens)} tok ${ms(u.latency_ms)}${u.cost_usd !== null ? ` ${money(u.cost_usd)}` : ""}`).join("; ")
          : (r.reason ? "no model call" : ""),
        r.tool_calls.map((c) => `${c.name}: ${label(c.outcome).toLowerCase()}`).join(", "),
        r.deliverables.map((d) => d.title || d.ref || clip(d.content, 80)).join("; ")], "runs")) : muted("No runs yet.")];
  },
  capabilities(data) {
    return [el("h3", { text: `Tools (${data.tools.length})` }),
      table(["Tool", "Effect", "Risk", "Approval", "Source"], data.tools.map((t) => [
        el("code", { text: t.name }), t.effect ? label(t.effect) : "Undeclared", label(t.risk), t.requires_approval ? "Required" : "", t.source])),
      el("h3", { text: `Skills (${data.skills.length})` }),
      el("ul", {}, data.skills.map((s) => el("li", {}, el("strong", { text: s.name }), ` (${label(s.level)}) ${clip(s.description, 160)}`))),
      el("h3", { text: `MCP servers (${data.mcp_servers.length})` }),
      data.mcp_servers.length ? el("ul", {}, data.mcp_servers.map((m) => el("li", {}, `${m.name} `, badge(m.status),
        m.reason ? ` ${m.reason}` : ""))) : muted("None configured.")];
  },
  channels(data) {
    const head = el("p", { class: "muted" }, "Ingress ", badge(data.ingress),
      data.can_reply ? " · replies enabled" : " · no replier configured");
    const owed = [...(data.undelivered || []).map((u) => el("li", {}, badge(u.state), ` ${u.platform} answer to ${u.sender_id}: `,
      el("q", { text: clip(u.answer, 120) }), ` (${u.delivery_attempts} attempts; ${u.last_error || ""}) `, el("code", { text: u.id }))),
    ...(data.attention || []).map((a) => el("li", {}, badge("needs a human"), ` ${a.platform} message from ${a.sender_id}: `,
      el("q", { text: clip(a.text, 120) }), ` (${a.reason}) `, el("code", { text: a.id })))];
    const owing = owed.length ? [el("h3", { text: `Owed to people on IM (${owed.length})` }), el("ul", {}, owed)] : [];
    if (!data.channels.length) return [head, muted("No channels configured."), ...owing];
    return [head, el("ul", {}, data.channels.map((c) => el("li", {}, `${c.platform} `, el("code", { text: c.adapter_id }),
      ` (${label(c.connection_mode)}) `, badge(c.status), c.note ? ` ${c.note}` : "", c.long_connection ? longConnection(c.long_connection) : ""))), ...owing];
  },
  briefs(data) {
    const head = el("p", { class: "muted",
      text: `${data.pending.length} items wait for the next brief${data.next_at ? ` (due ${when(data.next_at)})` : ""}` });
    if (!data.briefs.length) return [head, muted("No briefs sent yet.")];
    return [head, ...data.briefs.map((b) => el("details", { class: "item" },
      el("summary", {}, `${when(b.created_at)} · ${b.items} items `,
        badge(b.delivered === null ? "not delivered" : b.delivered ? "delivered" : "failed")),
      el("pre", { text: b.text })))];
  },
  decisions(list) {
    if (!list.length) return muted("No governance decisions recorded yet.");
    return table(["When", "Run", "Source", "Decision", "Reasons"], list.map((d) => [
      when(d.at), runLink(state.worker, d.run_id), `${label(d.source_type)}${d.duty_id ? ` (${d.duty_id})` : ""}`, badge(d.action),
      el("ul", {}, d.reasons.map((r) => el("li", { text: r.code ? `${r.code}: ${r.message}` : r.message })))]));
  },
};

// -- pages -----------------------------------------------------------------------

function dl(rows) {
  return el("dl", {}, rows.filter(([, v]) => v !== "" && v !== null && v !== undefined)
    .flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v instanceof Node ? v : String(v))]));
}
function stat(name, value, extra) {
  return el("div", { class: "stat" }, el("div", { class: "stat-value", text: value }), el("div", { class: "stat-name", text: name }), extra || null);
}
function section(title, ...children) { return el("section", { class: "panel" }, el("h3", { text: title }), ...children); }

const PAGES = {
  overview(data) {
    const t = data.totals;
    const content = [
      el("div", { class: "stats" },
        stat("Workers", num(t.workers)), stat("Open confirmations", num(t.open_confirmations)),
        stat(`Runs (${data.days} days)`, num(t.runs)), stat("Failed runs", num(t.failed)),
        stat("Tokens", num(t.tokens)), stat("Spend", money(t.cost_usd))),
      section("Workers", data.workers.length ? table(
        ["Worker", "Role", "Mode", "Health", "Open confirmations", `Runs (${data.days} d)`, "Failed", "Tokens", "Spend"],
        data.workers.map((w) => [workerLink(w.worker_id, w.name), w.role, badge(w.mode),
          [badge(w.health), w.issues ? el("a", { href: "#/health", text: ` ${w.issues} issue${w.issues > 1 ? "s" : ""}` }) : null],
          num(w.open_confirmations), num(w.runs), num(w.failed), num(w.tokens), money(w.cost_usd)]),
        "overview-workers") : muted("This key may not use any worker of the tenant.")),
    ];
    if (data.not_loaded.length) {
      content.push(section("Workers that did not load", el("p", { class: "reason" },
        `${data.not_loaded.join(", ")}: see `, el("a", { href: "#/health", text: "Workspace health" }), ".")));
    }
    const h = data.health;
    content.push(section("Workspace health", el("p", {}, h.errors || h.warnings
      ? `${h.errors} error${h.errors === 1 ? "" : "s"} and ${h.warnings} warning${h.warnings === 1 ? "" : "s"} in the tenant's files. `
      : "Every file of the tenant loaded without errors or warnings. ", el("a", { href: "#/health", text: "Open workspace health" }))),
      el("p", {}, el("a", { href: "#/usage", text: "Usage charts for every worker" })));
    $("#view-overview .content").replaceChildren(...content);
  },

  usage(data, r) {
    $("#h-usage").textContent = r.worker ? `Usage of ${r.worker}` : "Usage of every worker";
    const days = data.days.map((d) => d.slice(5));
    const tiers = Object.keys(data.per_tier);
    const t = data.totals;
    const charts = [
      el("div", { class: "stats" }, stat("Runs", num(t.runs)), stat("Failed", num(t.failed)), stat("Model calls", num(t.model_calls)),
        stat("Tokens", num(t.tokens)), stat("Spend", money(t.cost_usd))),
      el("p", { class: "muted", text: `The last ${data.days.length} days (UTC), from the run records of ${data.workers.join(", ") || "no worker"}.` }),
      Charts.bars({ title: "Runs and failures per day", labels: days, series: [
        { name: "Runs", values: data.per_day.map((d) => d.runs), cls: "s0" },
        { name: "Failed", values: data.per_day.map((d) => d.failed), cls: "bad" }] }),
      Charts.bars({ title: "Tokens per day, by model tier", labels: days, stacked: true,
        series: (tiers.length ? tiers : ["none"]).map((tier, k) => ({ name: label(tier),
          values: (data.per_tier[tier] || []).map((d) => d.tokens), cls: `s${k % 6}` })) }),
      data.cost_known
        ? Charts.bars({ title: "Cost per day, by model tier (USD)", labels: days, stacked: true, format: (v) => `$${+v.toFixed(4)}`,
          series: tiers.map((tier, k) => ({ name: label(tier), values: data.per_tier[tier].map((d) => d.cost_usd), cls: `s${k % 6}` })) })
        : section("Cost per day", muted("No model call in this window reported a cost (the model's price is not known to LiteLLM).")),
    ];
    const lat = data.latency_ms;
    const rows = [["All model calls", lat.model_calls], ...Object.entries(lat.per_tier).map(([k, v]) => [`Tier ${label(k)}`, v]),
      ["Whole runs", lat.runs]];
    charts.push(section("Latency percentiles", table(["Of", "Count", "p50", "p90", "p99"],
      rows.map(([k, v]) => [k, num(v.count), ms(v.p50), ms(v.p90), ms(v.p99)]), "latency"),
    Object.keys(lat.per_tier).length ? Charts.bars({ title: "Model call latency by tier (ms)", labels: Object.keys(lat.per_tier).map(label),
      series: ["p50", "p90", "p99"].map((p, k) => ({ name: p, values: Object.values(lat.per_tier).map((v) => v[p] || 0), cls: `s${k}` })) }) : null));
    $("#view-usage .content").replaceChildren(...charts);
  },

  health(data) {
    const where = (i) => i.worker_id ? `worker ${i.worker_id}` : "the tenant's own files";
    const status = { not_loaded: "did not load: nothing serves it", reload_refused: "a reload was refused; the last good version still serves",
      loaded: "loaded", tenant_not_loaded: "the tenant did not load" };
    const content = [el("p", { class: data.errors ? "reason" : "muted",
      text: data.files.length ? `${data.errors} error${data.errors === 1 ? "" : "s"} and ${data.warnings} warning${data.warnings === 1 ? "" : "s"}, in ${data.files.length} file${data.files.length === 1 ? "" : "s"}.`
        : "Every file loaded without errors or warnings." })];
    content.push(section("Workers", el("ul", {}, data.workers.map((w) => el("li", {},
      w.status === "not_loaded" ? w.worker_id : workerLink(w.worker_id), " ", badge(w.status))))));
    for (const f of data.files) {
      content.push(el("section", { class: "panel file", "data-file": f.file }, el("h3", {}, el("code", { text: f.file })),
        el("ul", {}, f.issues.map((i) => el("li", { class: `issue ${i.severity}` }, badge(i.severity), " ",
          el("strong", { text: i.line ? `line ${i.line}` : "whole file" }), i.field ? ` · ${i.field}` : "", `: ${i.message} `,
          el("span", { class: "muted", text: `(${where(i)}; ${status[i.status] || label(i.status)})` }))))));
    }
    content.push(muted("Fix the file: once it loads (hot reload on save, or POST /api/v1/worker/ops/reload) its entries go away."));
    $("#view-health .content").replaceChildren(...content);
  },

  worker(data, r) {
    const profile = data.blocks.profile;
    const name = profile && profile.status === "ok" ? profile.data.name : r.worker;
    $("#h-worker").textContent = `${name} (${r.worker})`;
    $("#view-worker .worker-head .content").replaceChildren(el("p", {},
      el("a", { href: `#/workers/${encodeURIComponent(r.worker)}/usage`, text: "Usage charts" }), " · ",
      el("a", { href: `#/workers/${encodeURIComponent(r.worker)}/channels`, text: "Channels" }), " · ",
      el("a", { href: `#/workers/${encodeURIComponent(r.worker)}/edit`, text: "Edit files" }), " · ",
      el("a", { href: `#/workers/${encodeURIComponent(r.worker)}/playground`, text: "Playground" }), " · ",
      "Open any run by its id in Tasks or Runs."));
    for (const [blockName, block] of Object.entries(data.blocks)) render(blockName, block);
  },

  run(d, r) {
    $("#h-run").textContent = `Run ${d.run_id}`;
    const p = d.provenance;
    const parts = [el("p", {}, badge(d.state), d.goal_status !== "not_applicable" ? badge(d.goal_status) : null,
      ` of `, workerLink(d.worker_id), ` · ${label(p.source_type || "manual")} · queued ${when(d.timings.queued_at)}`)];
    if (d.reason) {
      parts.push(el("div", { class: "failure", role: "note" }, el("strong", { text: `Why it ${label(d.state).toLowerCase()}: ` }), d.reason));
    }
    if (d.pending_approval) {
      parts.push(el("p", { class: "reason", text: `Waiting for a person to approve ${d.pending_approval.tool}${d.pending_approval.reason ? `: ${d.pending_approval.reason}` : ""}` }));
    }
    const t = d.timings;
    parts.push(section("Summary", dl([["Task", d.task_id], ["Thread", d.thread_id], ["Engine", d.engine], ["Skill", d.skill_id],
      ["Started", when(t.started_at)], ["Finished", when(t.finished_at)], ["Waited in queue", t.queue_ms === null ? null : ms(t.queue_ms)],
      ["Ran for", t.run_ms === null ? null : ms(t.run_ms)], ["Model calls", num(d.totals.model_calls)],
      ["Tokens", `${num(d.totals.prompt_tokens)} in, ${num(d.totals.completion_tokens)} out`], ["Cost", money(d.totals.cost_usd)],
      ["Fallback", d.fallback ? `${d.fallback.source} → ${d.fallback.target}${d.fallback.reason ? ` (${d.fallback.reason})` : ""}` : null]])));
    parts.push(section("Provenance", dl(Object.entries(p).map(([k, v]) => [label(k), Array.isArray(v) ? v.join(", ") : k === "source_type" ? label(v) : v]))));
    const g = d.governance;
    parts.push(section("Governance decision", g ? [el("p", {}, badge(g.action), g.posture ? ` posture ${label(g.posture)}` : "",
      g.risk_tier ? ` · risk tier ${g.risk_tier}` : "", g.policy_ref ? ` · policy snapshot ${g.policy_ref}` : ""),
      g.reasons.length ? el("ul", {}, g.reasons.map((x) => el("li", { text: x.code ? `${x.code}: ${x.message}` : x.message }))) : muted("No reasons recorded.")]
      : muted("No governance decision was recorded for this run.")));
    parts.push(runContext(d));  // runview.js
    parts.push(section(`Model calls (${d.model_calls.length})`, d.model_calls.length ? table(
      ["Purpose", "Tier", "Model", "Tokens in", "Tokens out", "Latency", "Cost", "Error"],
      d.model_calls.map((c) => [label(c.purpose), label(c.tier), el("code", { text: c.model || c.group }), num(c.prompt_tokens),
        num(c.completion_tokens), ms(c.latency_ms), money(c.cost_usd), c.error ? el("span", { class: "reason", text: c.error }) : ""]), "model-calls")
      : muted(d.reason ? "No model call was recorded: see why above." : "No model calls.")));
    parts.push(section(`Tool calls (${d.tool_calls.length})`, d.tool_calls.length ? table(
      ["Tool", "Effect", "Arguments (as audited, secrets redacted)", "Decision", "Outcome", "Duration"],
      d.tool_calls.map((c) => [el("code", { text: c.name }), c.effect ? badge(c.effect) : "not audited",
        c.audited ? el("pre", { class: "args", text: JSON.stringify(c.args, null, 2) }) : muted("not in the tool audit"),
        [c.decision ? badge(c.decision) : "", c.approved ? badge("approved") : null],
        [badge(c.outcome), c.code ? ` ${c.code}` : "", c.detail ? el("div", { class: "muted", text: c.detail }) : null], ms(c.duration_ms)]), "tool-calls")
      : muted("No tool calls.")));
    parts.push(section(`Deliverables (${d.deliverables.length})`, d.deliverables.length
      ? d.deliverables.map((x) => el("div", { class: "item" }, el("strong", { text: x.title || label(x.kind) }), x.ref ? [" ", el("code", { text: x.ref })] : "",
        x.content ? el("pre", { class: "deliverable", text: x.content }) : null))
      : muted("Nothing delivered.")));
    if (d.plan) {
      parts.push(section(`Plan (${label(d.plan.status)}, revision ${d.plan.revision}, ${d.plan.replans} replans)`,
        table(["Step", "State", "Depends on", "Error"], d.plan.nodes.map((n) => [el("code", { text: n.id }), badge(n.state),
          n.depends_on.join(", "), n.error || ""]), "plan")));
    }
    if (d.graph) {
      parts.push(section("Graph", dl([["Thread", d.graph.thread], ["Status", label(d.graph.status)],
        ["Steps", d.graph.steps.join(" → ")], ["Interrupted with", d.graph.interrupt ? JSON.stringify(d.graph.interrupt) : null]])));
    }
    if (d.checks.length) parts.push(section("Contract checks", table(["Check", "Verdict", "Detail"], d.checks.map((c) => [c.check, badge(c.verdict), c.detail || ""]))));
    if (d.deliveries.length) parts.push(section("Deliveries", table(["To", "State", "Delivered to", "Error"], d.deliveries.map((x) => [x.to, badge(x.state), x.delivered_to || "", x.error || ""]))));
    if (d.escalations.length) parts.push(section("Escalations", table(["Condition", "Target", "State", "Error"], d.escalations.map((x) => [x.condition, x.target, badge(x.state), x.error || ""]))));
    if (d.children.length) parts.push(section("Delegated runs", el("ul", {}, d.children.map((c) => el("li", {}, runLink(c.worker_id, c.run_id), ` (${c.worker_id})`)))));
    parts.push(runTimeline(d));  // runview.js
    parts.push(section("History", el("ol", { class: "history" }, d.history.map((h) => el("li", {}, el("time", { datetime: h.at, text: when(h.at) }), " ",
      badge(h.to), h.note ? ` ${h.note}` : "")))));
    $("#view-run .content").replaceChildren(...parts);
  },
};

document.addEventListener("DOMContentLoaded", start);
