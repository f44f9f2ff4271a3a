// The run view's context and timeline (#/workers/{w}/runs/{run}, drawn by dashboard.js's PAGES.run): the
// context's segments with their tokens as bars, and the run's AG-UI event timeline, both from the run's
// trace (GET /api/v1/workers/{w}/dashboard/runs/{run}: `context`, `timeline`). Uses dashboard.js's helpers.
"use strict";

const SEGMENT_LABELS = {
  system_identity: "Identity", constraints_rules: "Constraints and rules", contacts: "Contacts",
  memory: "Memory", history: "Conversation history", task: "Task",
};
const EVENT_LABELS = {
  RUN_STARTED: "Run started", RUN_FINISHED: "Run finished", RUN_ERROR: "Run failed",
  TEXT_MESSAGE_START: "Answer started", TEXT_MESSAGE_CONTENT: "Answer text", TEXT_MESSAGE_END: "Answer ended",
  TOOL_CALL_START: "Tool call", TOOL_CALL_ARGS: "Tool arguments", TOOL_CALL_END: "Tool call complete",
  TOOL_CALL_RESULT: "Tool result", STEP_STARTED: "Step started", STEP_FINISHED: "Step finished", CUSTOM: "Custom event",
};
Object.assign(LABELS, { trim_tool_outputs: "Tool outputs trimmed", prune_history: "History pruned",
  summarize_history: "History summarised", overflow_recovery: "Shrunk after an overflow" });

function tokenBar(tokens, largest, name) {
  const fill = el("span", { class: "tok-fill" });
  fill.style.width = `${largest > 0 ? Math.max(tokens > 0 ? 1 : 0, (100 * tokens) / largest) : 0}%`;  // CSSOM: CSP allows it
  return el("span", { class: "tok-bar", role: "img", "aria-label": `${name}: ${num(tokens)} tokens` }, fill);
}

// Where in the run an event happened: a dot on a line from its start to its last event.
function atMark(offset, end) {
  const dot = el("span", { class: "at-dot" });
  dot.style.left = `${(100 * offset) / end}%`;
  return el("span", { class: "at-track", "aria-hidden": "true" }, dot);
}

function runContext(d) {
  const c = d.context;
  if (!c.recorded) return section("Context", muted(`Not recorded: ${c.reason}.`));
  const largest = Math.max(0, ...c.segments.map((s) => s.tokens));
  const rows = c.segments.map((s) => {
    const name = SEGMENT_LABELS[s.name] || label(s.name);
    const held = [s.items ? `${num(s.items)} ${s.name === "history" ? "messages" : "items"}` : "",
      s.omitted ? `${num(s.omitted)} left out` : "", s.truncated ? "cut to fit" : ""].filter(Boolean).join(", ");
    return [name, el("div", { class: "tok" }, tokenBar(s.tokens, largest, name), el("span", { class: "tok-num", text: num(s.tokens) })),
      num(s.quota), held || "—"];
  });
  return section("Context", el("p", { class: "muted", text:
      `${num(c.total_tokens)} tokens of a ${num(c.budget)}-token input budget${c.summarised ? "; older history summarised" : ""}.` }),
    table(["Segment", "Tokens", "Quota", "Holds"], rows, "context-segments"),
    c.compaction.length ? el("ul", { class: "compaction" }, c.compaction.map((x) => el("li", {},
      `${label(x.step)}: ${num(x.tokens_before)} → ${num(x.tokens_after)} tokens${x.detail ? ` (${x.detail})` : ""}`))) : null);
}

function runTimeline(d) {
  const t = d.timeline;
  if (!t.recorded) return section("Event timeline (AG-UI)", muted(`Not recorded: ${t.reason}.`));
  const end = Math.max(1, ...t.events.map((e) => e.offset_ms));
  const rows = t.events.map((e) => [
    el("div", { class: "at" }, el("time", { text: `+${ms(e.offset_ms)}` }), atMark(e.offset_ms, end)),
    [el("span", { class: "event-name", text: EVENT_LABELS[e.type] || label(e.type) }), " ", el("code", { class: "event-type", text: e.type })],
    [e.summary ? el("span", { class: e.type === "RUN_ERROR" ? "reason" : "", text: e.summary }) : "",
      e.count > 1 ? el("span", { class: "muted", text: ` (${num(e.count)} deltas)` }) : null],
  ]);
  const wrap = table(["At", "Event", "Summary"], rows, "timeline");
  wrap.querySelectorAll("tbody tr").forEach((tr, i) => { tr.dataset.type = t.events[i].type; });
  return section(`Event timeline (AG-UI, ${num(t.events.length)} events)`,
    el("p", { class: "muted", text: `Times since the run was accepted (${when(t.started_at)}); text and argument deltas of one message or call are merged into one line.` }),
    wrap, t.dropped ? muted(`${num(t.dropped)} later events were not kept (the timeline keeps at most its first entries and the run's end).`) : null);
}
