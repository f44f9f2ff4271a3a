// The console's editor (#/workers/{w}/edit): a worker's PERSONA.md, duties, goals and skill files in a
// textarea. As you type, the server's workspace loader checks the text (POST .../validate-file, debounced)
// and its issues are listed with their line; Save is enabled only while the text loads. A save sends the
// version the file was opened at: a file changed on disk since is refused (409), never overwritten; where the
// workspace is a git repository the server commits it. Uses dashboard.js's helpers (el, api, state, PAGES).
"use strict";

const CHECK_DELAY_MS = 400;
// epoch: the session it was built in (dashboard.js changes it at log in and out); seq: the latest check
const editor = { epoch: -1, worker: null, path: null, base: null, saved: "", timer: null, seq: 0, valid: false, busy: false };

function filesUrl(worker, path) {
  const base = `/api/v1/workers/${encodeURIComponent(worker)}/files`;
  return path ? `${base}/${path.split("/").map(encodeURIComponent).join("/")}` : base;
}

PAGES.edit = function editPage(data, r) {
  if (editor.epoch !== state.epoch || editor.worker !== r.worker || !$("#editor-text")) build(r.worker, data);
  listFiles(data);
};

function build(worker, data) {
  Object.assign(editor, { epoch: state.epoch, worker, path: null, base: null, saved: "", valid: false, busy: false });
  clearTimeout(editor.timer);
  const git = data.git.repository
    ? ["A save is committed to the workspace's git repository as ", el("strong", { text: data.git.author }), "."]
    : [data.git.note || "The workspace is not a git repository: a save writes the file only."];
  $("#view-edit .content").replaceChildren(
    el("p", {}, "Files of ", workerLink(worker), ". ", ...git, " Only text that loads can be saved."),
    el("div", { class: "editor" },
      el("nav", { class: "editor-files", "aria-label": "Files" }, el("ul", { id: "editor-files" })),
      el("div", { class: "editor-main" },
        el("p", { id: "editor-stale", class: "failure", role: "alert", hidden: true }),
        el("label", { for: "editor-text", id: "editor-label", text: "Choose a file" }),
        el("textarea", { id: "editor-text", spellcheck: "false", rows: 24, disabled: true, oninput: changed }),
        el("div", { id: "editor-issues", class: "editor-issues", role: "status", "aria-live": "polite" }),
        el("label", { for: "editor-message", text: "Commit message" }),
        el("input", { id: "editor-message", type: "text", maxlength: 2000, placeholder: "Say what you changed and why" }),
        el("div", { class: "actions" },
          el("button", { type: "button", id: "editor-save", disabled: true, onclick: save }, "Save"),
          el("button", { type: "button", id: "editor-reopen", disabled: true, onclick: () => open(editor.path, true) }, "Reload from disk")),
        el("p", { id: "editor-result", class: "editor-result", role: "status" }))));
  const first = data.files.find((f) => f.kind === "persona") || data.files[0];
  if (first) open(first.path);
}

function listFiles(data) {
  $("#editor-files").replaceChildren(...data.files.map((f) => el("li", {},
    el("button", { type: "button", class: "link", "data-path": f.path, "aria-current": f.path === editor.path ? "true" : null,
      onclick: () => open(f.path) }, f.path), " ", el("span", { class: "muted", text: label(f.kind) }))));
  const listed = data.files.find((f) => f.path === editor.path);
  const stale = listed && editor.base && listed.version !== editor.base && !editor.busy;
  const notice = $("#editor-stale");
  notice.hidden = !stale;
  notice.textContent = stale ? `${editor.path} changed on disk since you opened it: saving would be refused. ` +
    "Copy your text if you need it, then Reload from disk." : "";
}

async function open(path, again = false) {
  const text = $("#editor-text");
  if (!again && path === editor.path) return;
  if (text.value !== editor.saved && editor.path && !confirm(`Discard your changes to ${editor.path}?`)) return;
  const epoch = state.epoch;
  text.disabled = true;
  try {
    const file = await api(filesUrl(editor.worker, path));
    if (epoch !== state.epoch) return;
    Object.assign(editor, { path, base: file.version, saved: file.content, busy: false });
    text.value = file.content;
    text.disabled = false;
    $("#editor-label").replaceChildren("Text of ", el("code", { text: file.file }));
    $("#editor-reopen").disabled = false;
    $("#editor-result").textContent = "";
    $("#editor-stale").hidden = true;
    for (const b of document.querySelectorAll("#editor-files button")) {
      if (b.dataset.path === path) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
    }
    check();
  } catch (error) {
    if (epoch === state.epoch) $("#editor-result").textContent = `Could not open ${path}: ${error.message}`;
  }
}

function changed() {
  editor.valid = false;
  $("#editor-save").disabled = true;
  $("#editor-issues").replaceChildren(el("p", { class: "muted", text: "Checking…" }));
  clearTimeout(editor.timer);
  editor.timer = setTimeout(check, CHECK_DELAY_MS);
}

async function check() {
  const seq = ++editor.seq;
  const epoch = state.epoch;
  const content = $("#editor-text").value;
  try {
    const result = await api(`/api/v1/workers/${encodeURIComponent(editor.worker)}/validate-file`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ path: editor.path, content }),
    });
    if (seq !== editor.seq || epoch !== state.epoch) return;  // the text changed again meanwhile
    editor.valid = result.valid;
    showIssues(result.issues, result.file);
  } catch (error) {
    if (seq !== editor.seq || epoch !== state.epoch) return;
    editor.valid = false;
    $("#editor-issues").replaceChildren(el("p", { class: "reason", text: `Could not check the text: ${error.message}` }));
  }
  ready();
}

function ready() {
  const text = $("#editor-text").value;
  $("#editor-save").disabled = !editor.valid || editor.busy || text === editor.saved;
}

// Each issue with its line; one of the edited file selects that line when clicked.
function showIssues(issues, file) {
  const box = $("#editor-issues");
  if (!issues.length) {
    box.replaceChildren(el("p", { class: "ok", text: "Loads without errors or warnings." }));
    return;
  }
  const errors = issues.filter((i) => i.severity === "error").length;
  box.replaceChildren(
    el("p", { class: errors ? "reason" : "muted", text: errors
      ? `${errors} error${errors > 1 ? "s" : ""}: this text cannot be saved until ${errors > 1 ? "they are" : "it is"} fixed.`
      : "Loads, with warnings." }),
    el("ul", {}, issues.map((i) => el("li", { class: `issue ${i.severity}` }, badge(i.severity), " ",
      i.line && i.file === file
        ? el("button", { type: "button", class: "link", onclick: () => selectLine(i.line) }, `line ${i.line}`)
        : el("strong", { text: i.line ? `line ${i.line}` : "whole file" }),
      i.file !== file ? [" of ", el("code", { text: i.file })] : "",
      i.field ? ` · ${i.field}` : "", `: ${i.message}`))));
}

function selectLine(line) {
  const text = $("#editor-text");
  const lines = text.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  text.focus();
  text.setSelectionRange(start, start + (lines[line - 1] || "").length);
  const height = parseFloat(getComputedStyle(text).lineHeight) || 16;  // near the line (wrapped lines aside)
  text.scrollTop = Math.max(0, (line - 3) * height);
}

async function save() {
  const epoch = state.epoch;
  const content = $("#editor-text").value;
  const result = $("#editor-result");
  editor.busy = true;
  ready();
  result.textContent = "Saving…";
  try {
    const saved = await api(filesUrl(editor.worker, editor.path), {
      method: "PUT", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ content, base_version: editor.base, message: $("#editor-message").value }),
    });
    if (epoch !== state.epoch) return;
    Object.assign(editor, { base: saved.version, saved: content });
    $("#editor-message").value = "";
    const where = saved.commit
      ? ["Saved and committed ", el("code", { class: "sha", text: saved.commit.sha.slice(0, 12) }), ` as ${saved.commit.author}.`]
      : [`Saved; not committed: ${saved.git.reason}.`];
    const reload = saved.reload && !saved.reload.ok
      ? ` The worker did not reload: ${saved.reload.errors.map((e) => e.message).join("; ")}` : saved.reload ? " The worker was reloaded." : "";
    result.replaceChildren(...where, reload);
  } catch (error) {
    if (epoch !== state.epoch) return;
    const body = error.body && error.body.error;
    if (body && body.issues) showIssues(body.issues, body.file);
    result.textContent = error.status === 409 && body && body.code === "edit_conflict"
      ? `Not saved: ${body.message}. Your text is still here; copy it if you need it, then Reload from disk.`
      : `Not saved: ${error.message}`;
  } finally {
    if (epoch === state.epoch) {
      editor.busy = false;
      ready();
    }
  }
}
