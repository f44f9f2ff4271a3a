// The console's playground (#/workers/{w}/playground): chat with a worker through the same SSE API as any
// client (POST /api/v1/chat/stream, AG-UI events), as the session's key (its cookie and CSRF header). Text is
// shown as it streams in, each tool call inline with its arguments and result, and a call that needs a person
// with Approve / Reject, decided through the confirmations API: the approved call runs, the run continues and
// its answer is shown. The page's own data (/confirmations?status=pending, refreshed like every page) marks a
// call decided elsewhere. Conversations live in this page's memory only, never in storage: a new session (log
// in, log out) drops them and stops their streams. Uses dashboard.js's helpers (el, api, state, ...).
(() => {
  "use strict";

  const chats = new Map();  // worker -> its conversation (built on first visit in this session)
  let epoch = -1;
  const RESULT_CHARS = 2000;

  Object.assign(LABELS, { approval_required: "Waiting for approval", running_tool: "Running", called: "Called" });

  function reset() {
    for (const chat of chats.values()) if (chat.controller) chat.controller.abort();
    chats.clear();
    epoch = state.epoch;
  }
  document.addEventListener("console:forget", reset);

  PAGES.playground = function playgroundPage(data, r) {
    if (epoch !== state.epoch) reset();
    let chat = chats.get(r.worker);
    if (!chat) chats.set(r.worker, chat = build(r.worker));
    const host = $("#view-playground .content");
    if (host.firstChild !== chat.root) host.replaceChildren(chat.root);
    reconcile(chat, data.confirmations);
  };

  function build(worker) {
    const chat = { worker, thread: null, busy: false, controller: null, approvals: [] };
    chat.threadLabel = el("span", { class: "muted", text: "New conversation" });
    chat.log = el("ol", { class: "pg-log", role: "log", "aria-label": `Conversation with ${worker}` });
    chat.input = el("textarea", { id: "pg-message", name: "message", rows: 3, required: true,
      onkeydown: (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); chat.form.requestSubmit(); } } });
    chat.send = el("button", { type: "submit" }, "Send");
    chat.fresh = el("button", { type: "button", onclick: () => restart(chat) }, "New conversation");
    chat.form = el("form", { class: "pg-form", onsubmit: (e) => { e.preventDefault(); submit(chat); } },
      el("label", { for: "pg-message", text: `Message to ${worker}` }), chat.input,
      el("div", { class: "actions" }, chat.send, chat.fresh));
    chat.root = el("div", { class: "playground" },
      el("p", { class: "muted" }, "Chat with ", workerLink(worker), " through the chat API (", el("code", { text: "POST /api/v1/chat/stream" }),
        "), as this session's key. Tool calls show inline; a call that needs a person waits for your Approve or Reject here."),
      el("p", { class: "pg-thread" }, "Thread: ", chat.threadLabel),
      chat.log, chat.form);
    return chat;
  }

  function restart(chat) {
    if (chat.busy) return;
    chat.thread = null;
    chat.approvals = [];
    chat.log.replaceChildren();
    chat.threadLabel.replaceChildren("New conversation");
    chat.input.focus();
  }

  function setThread(chat, thread) {
    if (!thread || chat.thread === thread) return;
    chat.thread = thread;
    chat.threadLabel.replaceChildren(el("code", { text: thread }));
  }

  function turn(chat, who, cls) {
    const body = el("div", { class: "pg-body" });
    const foot = el("div", { class: "pg-foot" });
    const li = el("li", { class: `pg-turn ${cls}` }, el("div", { class: "pg-who", text: who }), body, foot);
    chat.log.append(li);
    li.scrollIntoView({ block: "nearest" });
    return { li, body, foot, calls: {}, text: null, streamed: false, runId: null };
  }

  async function submit(chat) {
    const message = chat.input.value.trim();
    if (!message || chat.busy) return;
    const mine = state.epoch;
    chat.busy = true;
    chat.send.disabled = chat.fresh.disabled = true;
    chat.input.value = "";
    turn(chat, "You", "user").body.append(el("p", { class: "pg-text", text: message }));
    const t = turn(chat, chat.worker, "worker");
    t.li.setAttribute("aria-busy", "true");
    chat.controller = new AbortController();
    try {
      await stream(chat, t, message, mine);
    } catch (error) {
      if (mine === state.epoch && error.name !== "AbortError") failure(t, `The stream broke: ${error.message}`);
    } finally {
      if (mine === state.epoch) {
        t.li.removeAttribute("aria-busy");
        chat.busy = false;
        chat.controller = null;
        chat.send.disabled = chat.fresh.disabled = false;
        if (chat.root.isConnected) chat.input.focus();
      }
    }
  }

  async function stream(chat, t, message, mine) {
    const body = { worker_id: chat.worker, message, ...(chat.thread ? { thread_id: chat.thread } : {}) };
    const response = await fetch("/api/v1/chat/stream", {
      method: "POST", credentials: "same-origin", signal: chat.controller.signal, body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", Accept: "text/event-stream", "X-CSRF-Token": state.csrf },
    });
    if (mine !== state.epoch) return;
    if (!response.ok) {
      const answer = await response.json().catch(() => null);
      if (response.status === 401) { showLogin("The session ended: log in again."); return; }
      failure(t, `Not sent (HTTP ${response.status}): ${answer && answer.error ? answer.error.message : response.statusText}`);
      return;
    }
    setThread(chat, response.headers.get("X-Thread-Id"));
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (mine !== state.epoch) { reader.cancel().catch(() => null); return; }
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (data) handle(chat, t, JSON.parse(data));
      }
    }
    if (!t.foot.childNodes.length) failure(t, "The stream ended before the run finished.");
  }

  // One AG-UI event (https://docs.ag-ui.com/concepts/events), as chat.py sends them.
  function handle(chat, t, ev) {
    switch (ev.type) {
      case "RUN_STARTED": t.runId = ev.runId; setThread(chat, ev.threadId); break;
      case "TEXT_MESSAGE_START":
        t.text = el("p", { class: "pg-text", "data-deltas": 0 });
        t.body.append(t.text);
        break;
      case "TEXT_MESSAGE_CONTENT":
        if (!t.text) handle(chat, t, { type: "TEXT_MESSAGE_START" });
        t.text.textContent += ev.delta;
        t.text.dataset.deltas = Number(t.text.dataset.deltas) + 1;
        t.streamed = true;
        break;
      case "TEXT_MESSAGE_END": t.text = null; break;
      case "TOOL_CALL_START": toolCard(t, ev.toolCallId, ev.toolCallName); break;
      case "TOOL_CALL_ARGS": {
        const call = toolCard(t, ev.toolCallId);
        call.args += ev.delta;
        call.argsPre.textContent = pretty(call.args);
        break;
      }
      case "TOOL_CALL_END": setBadge(toolCard(t, ev.toolCallId), "called"); break;
      case "TOOL_CALL_RESULT": {
        const call = toolCard(t, ev.toolCallId);
        const content = String(ev.content || "");
        call.result.replaceChildren(el("div", { class: "pg-label", text: "Result" }),
          el("pre", { class: "args", text: content.length > RESULT_CHARS ? `${content.slice(0, RESULT_CHARS)}…` : content }));
        setBadge(call, "done");
        break;
      }
      case "STEP_STARTED": t.body.append(el("p", { class: "pg-step muted", text: `Step ${ev.stepName}` })); break;
      case "STEP_FINISHED": break;
      case "CUSTOM":
        if (ev.name === "approval_required") approvalAsked(chat, t, ev.value);
        else t.body.append(el("p", { class: "pg-step muted", text: `${label(ev.name)}: ${clip(JSON.stringify(ev.value), 240)}` }));
        break;
      case "RUN_FINISHED": finished(chat, t, ev.runId, ev.result || {}); break;
      case "RUN_ERROR": failure(t, `${ev.code ? `${ev.code}: ` : ""}${ev.message}`); break;
      default: break;
    }
  }

  function pretty(args) {
    try { return JSON.stringify(JSON.parse(args), null, 2); } catch (_) { return args; }
  }

  function toolCard(t, id, name) {
    if (t.calls[id]) return t.calls[id];
    const call = { id, name: name || "tool", args: "", argsPre: el("pre", { class: "args" }), result: el("div"), badge: null };
    call.badgeHost = el("span");
    call.node = el("details", { class: "pg-tool", "data-tool": call.name, "data-call": id },
      el("summary", {}, "Tool call ", el("code", { text: call.name }), call.badgeHost),
      el("div", { class: "pg-label", text: "Arguments" }), call.argsPre, call.result);
    t.calls[id] = call;
    t.text = null;  // text after a tool call is a new paragraph
    t.body.append(call.node);
    setBadge(call, "running_tool");
    return call;
  }

  function setBadge(call, value) { call.badgeHost.replaceChildren(badge(value)); }

  function approvalAsked(chat, t, value) {
    const call = toolCard(t, value.tool_call_id, value.tool);
    if (!call.args && value.arguments) call.argsPre.textContent = pretty(String(value.arguments));
    setBadge(call, "needs_approval");
    call.result.replaceChildren();  // "[approval required] ...": the call did not run; the box below says why
    call.node.open = true;
    const approval = { chat, call, turn: t, runId: t.runId, id: null, decided: false };
    approval.approve = el("button", { type: "button", class: "approve", disabled: true, "aria-label": `Approve: ${call.name}`,
      onclick: () => decide(approval, "approve") }, "Approve");
    approval.reject = el("button", { type: "button", class: "reject", disabled: true, "aria-label": `Reject: ${call.name}`,
      onclick: () => decide(approval, "reject") }, "Reject");
    approval.note = el("p", { class: "pg-note", role: "status", text: "Looking up the confirmation…" });
    approval.actions = el("div", { class: "actions" }, approval.approve, approval.reject);
    approval.box = el("div", { class: "pg-approval" }, el("p", { class: "reason", text: value.reason || `${call.name} needs a person's approval` }),
      approval.actions, approval.note);
    call.node.append(approval.box);
    chat.approvals.push(approval);
  }

  function finished(chat, t, runId, result) {
    t.runId = runId || t.runId;
    if (!t.streamed && result.output) t.body.append(el("p", { class: "pg-text", text: result.output }));
    const outcome = result.outcome || "completed";
    t.foot.replaceChildren(badge(outcome), " run ", runLink(chat.worker, t.runId));
    if (outcome === "approval_required") lookUp(chat, t.runId);
  }

  async function lookUp(chat, runId) {
    const mine = state.epoch;
    const waiting = chat.approvals.filter((a) => a.runId === runId && !a.id);
    try {
      const data = await api(`/api/v1/workers/${encodeURIComponent(chat.worker)}/confirmations?status=pending`);
      if (mine !== state.epoch) return;
      for (const a of waiting) {
        const found = data.confirmations.find((c) => c.run_id === runId && c.tool_call && c.tool_call.id === a.call.id)
          || data.confirmations.find((c) => c.run_id === runId);
        if (!found) { a.note.textContent = "No pending confirmation for this call: it may have been decided already."; continue; }
        a.id = found.confirmation_id;
        a.box.dataset.confirmation = a.id;
        a.approve.disabled = a.reject.disabled = false;
        a.note.textContent = `Confirmation ${a.id}: approve to run this call and let the run continue.`;
      }
    } catch (error) {
      if (mine === state.epoch) for (const a of waiting) a.note.textContent = `Could not look up the confirmation: ${error.message}`;
    }
  }

  async function decide(a, decision) {
    const { chat } = a;
    const mine = state.epoch;
    const approving = decision === "approve";
    a.approve.disabled = a.reject.disabled = true;
    a.note.textContent = approving ? "Approved: the call runs and the run continues…" : "Rejecting…";
    const next = approving ? turn(chat, chat.worker, "worker") : null;
    if (next) {
      next.li.setAttribute("aria-busy", "true");
      next.body.append(muted(`Running the approved ${a.call.name} call, then the rest of the run…`));
    }
    try {
      const answer = await api(`/api/v1/workers/${encodeURIComponent(chat.worker)}/confirmations/${encodeURIComponent(a.id)}/${decision}`,
        { method: "POST" });
      if (mine !== state.epoch) return;
      settle(a, approving ? "approved" : "rejected");
      a.turn.foot.replaceChildren(badge(approving ? "superseded" : "cancelled"), " run ", runLink(chat.worker, a.runId));
      if (!next) { a.note.textContent = "Rejected: the waiting run was cancelled."; return; }
      a.note.textContent = "Approved: the call ran and the run continued below.";
      next.li.removeAttribute("aria-busy");
      next.body.replaceChildren(...(answer.output ? [el("p", { class: "pg-text", text: answer.output })] : []));
      const run = answer.run;
      if (run) {
        setThread(chat, run.thread_id);
        next.foot.replaceChildren(badge(run.state), " run ", runLink(chat.worker, run.run_id), " (continued after the approval)");
      } else {
        next.foot.replaceChildren(muted("The approval ran nothing further."));
      }
    } catch (error) {
      if (mine !== state.epoch) return;
      if (next) next.li.remove();
      a.note.textContent = error.status === 409 ? `Already decided: ${error.message}` : `Could not ${decision}: ${error.message}`;
      if (error.status === 409) settle(a, "decided_elsewhere");
      else a.approve.disabled = a.reject.disabled = false;
    }
  }

  function settle(a, outcome) {
    a.decided = true;
    a.actions.remove();
    setBadge(a.call, outcome);
  }

  // The page's refresh: a call still shown as waiting but no longer pending was decided elsewhere.
  function reconcile(chat, pending) {
    const open = new Set((pending || []).map((c) => c.confirmation_id));
    for (const a of chat.approvals) {
      if (!a.id || a.decided || open.has(a.id) || a.approve.disabled) continue;
      settle(a, "decided_elsewhere");
      a.note.textContent = "Decided elsewhere (the worker's page, IM or the API).";
    }
  }

  function failure(t, text) {
    t.body.append(el("div", { class: "failure", role: "note", text }));
    if (!t.foot.childNodes.length) t.foot.replaceChildren(badge("failed"));
  }
})();
