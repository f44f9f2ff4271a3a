// genworker dashboard: plain DOM, no build step, no third-party code. Data arrives from
// GET /api/v1/workers/{w}/dashboard; every text goes through textContent (never innerHTML).
"use strict";

// `epoch` changes at every log in and log out: a response that arrives later for an older session
// is dropped, so one tenant's data never shows in another's session (or after logging out).
const state = { csrf: null, worker: null, refreshS: 15, timer: null, loading: null, again: false, epoch: 0 };

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

function badge(text) { return el("span", { class: `badge ${text}`, text }); }
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
    throw error;
  }
  return body;
}

// -- session ---------------------------------------------------------------------

async function start() {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  $("#refresh").addEventListener("click", () => load());
  $("#worker").addEventListener("change", (e) => { state.worker = e.target.value; load(); });
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
  $("#session").hidden = true;
  $("#main").hidden = true;
  $("#skip").hidden = true;
  $("#tenant").textContent = "";
  $("#worker").replaceChildren();
  $("#updated").textContent = "";
  delete document.body.dataset.loaded;
  for (const host of document.querySelectorAll("[data-block]")) {
    host.querySelector(":scope > .body").replaceChildren();
    delete host.dataset.status;
    host.classList.remove("degraded");
  }
  $('[data-block="load_errors"]').hidden = true;
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
  $("#login").hidden = true;
  $("#session").hidden = false;
  $("#main").hidden = false;
  $("#skip").hidden = false;
  $("#tenant").textContent = `Tenant ${session.tenant_id}`;
  const select = $("#worker");
  select.replaceChildren(...session.workers.map((w) => el("option", { value: w, text: w })));
  state.worker = session.default_worker;
  if (state.worker) select.value = state.worker;
  if (!session.workers.length) say("This key may not use any worker of the tenant.");
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
  say("Logging out…");
  await api("/dashboard/logout", { method: "POST" }).catch(() => null);
  showLogin("Logged out.");
}

// -- loading ---------------------------------------------------------------------

function view() { return `${state.epoch}/${state.worker}`; }

async function load() {
  const current = view();
  if (!state.worker) return;
  if (state.loading === current) { state.again = true; return; }  // once this one is in, load again
  state.loading = current;
  state.again = false;
  try {
    const data = await api(`/api/v1/workers/${encodeURIComponent(state.worker)}/dashboard`);
    if (view() !== current) return;  // logged out, or another worker chosen, meanwhile
    for (const [name, block] of Object.entries(data.blocks)) render(name, block);
    $("#updated").textContent = `Updated ${new Date(data.generated_at).toLocaleTimeString()}`;
    document.body.dataset.loaded = data.generated_at;
  } catch (error) {
    if (view() !== current) return;
    if (error.status === 401) { showLogin(); return; }
    say(`Could not load the dashboard: ${error.message}`);
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
    const label = { unavailable: "Unavailable", timeout: "Timed out", error: "Failed" }[block.status] || block.status;
    body.replaceChildren(el("p", { class: "reason" }, el("strong", { text: `${label}: ` }), block.reason || ""));
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

function table(headers, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function provenance(p) {
  return Object.entries(p || {}).map(([k, v]) => `${k}=${v}`).join(" · ");
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
      el("strong", { text: w.name }), ` (${w.worker_id}) ${w.role || ""} `, w.loaded ? badge(w.mode) : badge("failed"))));
  },
  profile(p) {
    const rows = [["Name", p.name], ["Role", p.role], ["Department", p.department], ["Mode", p.mode],
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
      const origin = [e.origin.tool || e.origin.kind, e.origin.run_id ? `run ${e.origin.run_id.slice(-13)}` : ""]
        .filter(Boolean).join(" · ");
      return el("div", { class: "item", "data-outbox": e.id },
        el("div", {}, el("strong", { text: `To ${to}` }), badge(e.state), e.subject ? ` ${e.subject}` : ""),
        el("q", { text: e.text.slice(0, 200) }),
        el("div", { class: "muted", text: [e.attempts ? `${e.attempts} failed attempt${e.attempts > 1 ? "s" : ""}` : "", e.last_error, origin,
          `since ${when(e.created_at)}`, e.resent_by ? `re-sent by ${e.resent_by}` : ""].filter(Boolean).join(" · ") }),
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
        el("code", { text: t.run_id.slice(-13) }), badge(t.state),
        provenance(t.provenance) + (t.error ? ` · ${t.error.code}` : ""), when(t.queued_at)])) : muted("None.")];
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
      el("div", {}, el("strong", { text: g.title }), badge(g.status), badge(g.priority), badge(g.health)),
      el("div", { class: "muted", text: `${g.progress.done}/${g.progress.total} tasks done${g.deadline ? ` · due ${g.deadline}` : ""}` }),
      el("ul", {}, g.milestones.map((m) => el("li", {}, `${m.title} `, badge(m.status),
        el("ul", {}, m.tasks.map((t) => el("li", {}, `${t.title} `, badge(t.status))))))),
      g.blocked_tasks.length ? el("div", {}, el("h3", { text: "Blocked" }), el("ul", {}, g.blocked_tasks.map((t) =>
        el("li", { text: `${t.title}${t.waiting_on.length ? ` — waits on ${t.waiting_on.join(", ")}` : ""}` })))) : null,
      g.last_verdict ? el("div", {}, el("h3", {}, "Last verdict ", badge(g.last_verdict.goal_status)),
        el("div", { class: "muted", text: `run ${g.last_verdict.run_id.slice(-13)}${g.last_verdict.task_id ? ` · task ${g.last_verdict.task_id}` : ""} · ${when(g.last_verdict.evaluated_at)}` }),
        el("ul", {}, g.last_verdict.reasons.map((r) => el("li", { text: r })))) : null));
  },
  activity(list) {
    if (!list.length) return muted("No activity yet.");
    return el("ul", {}, list.map((a) => el("li", {}, el("time", { datetime: a.at, text: when(a.at) }), ` ${a.text}`)));
  },
  runs(data) {
    const t = data.totals;
    const cost = t.cost_usd === null ? "n/a" : `$${t.cost_usd}`;
    return [el("p", { class: "muted", text: `${t.runs} runs · ${t.model_calls} model calls · ${t.tokens} tokens · cost ${cost}` }),
      data.runs.length ? table(["Run", "State", "Model usage", "Tool calls", "Deliverables"], data.runs.map((r) => [
        el("code", { text: r.run_id.slice(-13) }), [badge(r.state), r.execution_depth ? badge(r.execution_depth) : null],
        r.model_usage.map((u) => `${u.model} ${u.tokens} tok ${u.latency_ms} ms${u.cost_usd !== null ? ` $${u.cost_usd}` : ""}`).join("; "),
        r.tool_calls.map((c) => `${c.name}:${c.outcome}`).join(", "),
        r.deliverables.map((d) => d.title || d.ref || d.content.slice(0, 80)).join("; ")])) : muted("No runs yet.")];
  },
  capabilities(data) {
    return [el("h3", { text: `Tools (${data.tools.length})` }),
      table(["Tool", "Effect", "Risk", "Approval", "Source"], data.tools.map((t) => [
        el("code", { text: t.name }), t.effect || "undeclared", t.risk, t.requires_approval ? "required" : "", t.source])),
      el("h3", { text: `Skills (${data.skills.length})` }),
      el("ul", {}, data.skills.map((s) => el("li", {}, el("strong", { text: s.name }), ` (${s.level}) ${s.description}`))),
      el("h3", { text: `MCP servers (${data.mcp_servers.length})` }),
      data.mcp_servers.length ? el("ul", {}, data.mcp_servers.map((m) => el("li", {}, `${m.name} `, badge(m.status),
        m.reason ? ` ${m.reason}` : ""))) : muted("None configured.")];
  },
  channels(data) {
    const head = el("p", { class: "muted" }, "Ingress ", badge(data.ingress),
      data.can_reply ? " · replies enabled" : " · no replier configured");
    const owed = [...(data.undelivered || []).map((u) => el("li", {}, badge(u.state), ` ${u.platform} answer to ${u.sender_id}: `,
      el("q", { text: u.answer.slice(0, 120) }), ` (${u.delivery_attempts} attempts; ${u.last_error || ""}) `, el("code", { text: u.id }))),
    ...(data.attention || []).map((a) => el("li", {}, badge("needs a human"), ` ${a.platform} message from ${a.sender_id}: `,
      el("q", { text: a.text.slice(0, 120) }), ` (${a.reason}) `, el("code", { text: a.id })))];
    const owing = owed.length ? [el("h3", { text: `Owed to people on IM (${owed.length})` }), el("ul", {}, owed)] : [];
    if (!data.channels.length) return [head, muted("No channels configured."), ...owing];
    return [head, el("ul", {}, data.channels.map((c) => el("li", {}, `${c.platform} `, el("code", { text: c.adapter_id }),
      ` (${c.connection_mode}) `, badge(c.status), c.note ? ` ${c.note}` : "", c.long_connection ? longConnection(c.long_connection) : ""))), ...owing];
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
    return table(["When", "Source", "Decision", "Reasons"], list.map((d) => [
      when(d.at), `${d.source_type}${d.duty_id ? `:${d.duty_id}` : ""}`, badge(d.action),
      el("ul", {}, d.reasons.map((r) => el("li", { text: r.code ? `${r.code}: ${r.message}` : r.message })))]));
  },
};

document.addEventListener("DOMContentLoaded", start);
