// The console's channels page (#/workers/{w}/channels): the worker's channel bindings with their delivery
// status and a "Test connection" button each (POST /api/v1/channel/{adapter}/test: the vendor's auth or token
// call with the stored credentials), and a form to enter a platform's credentials (PUT .../im-config). Secrets
// are write-only: the page shows only whether each is set, and empties what was typed once it is saved.
// Channels are bound in PERSONA.md `channels[]` (the editor). Uses dashboard.js's helpers (el, api, state, ...);
// its own names stay inside one function scope, apart from the other scripts'.
(() => {
  "use strict";

  // epoch: the session the form was built in (dashboard.js changes it at log in and out)
  const channels = { epoch: -1, worker: null, platforms: [], stored: {}, bound: [], results: {} };

  Object.assign(LABELS, {
    slack: "Slack", feishu: "Feishu / Lark", wecom: "WeCom", dingtalk: "DingTalk", email: "Email",
    unconfigured: "No credentials", refused: "Refused by the vendor", unavailable: "Vendor unavailable",
    unreachable: "Vendor unreachable", mismatch: "Wrong workspace", unsupported: "No test for this platform",
  });

  function imConfigUrl(worker) { return `/api/v1/workers/${encodeURIComponent(worker)}/im-config`; }

  PAGES.channels = function channelsPage(data, r) {
    if (channels.epoch !== state.epoch || channels.worker !== r.worker || !$("#channel-form")) build(r.worker);
    channels.bound = data.channels;
    listBindings(r.worker, data.channels);
  };

  function build(worker) {
    Object.assign(channels, { epoch: state.epoch, worker, platforms: [], stored: {}, results: {} });
    const edit = el("a", { href: `#/workers/${encodeURIComponent(worker)}/edit`, text: "PERSONA.md" });
    $("#view-channels .content").replaceChildren(
      el("p", {}, "Channels of ", workerLink(worker), ". A channel is bound in the ", el("code", { text: "channels" }),
        " list of ", edit, "; its credentials are kept in ", el("code", { text: "CHANNEL_CREDENTIALS.json" }),
        " and entered below. Secrets are never shown back, only whether each is set."),
      section("Bindings", el("div", { id: "channel-bindings" })),
      section("Credentials", el("form", { id: "channel-form", class: "channel-form", onsubmit: save },
        el("label", { for: "channel-platform", text: "Platform" }),
        el("select", { id: "channel-platform", onchange: (e) => showFields(e.target.value) }),
        el("div", { id: "channel-fields" }),
        el("div", { class: "actions" }, el("button", { type: "submit", id: "channel-save" }, "Save credentials")),
        el("p", { id: "channel-result", role: "status" }))));
    loadForm(worker);
  }

  async function loadForm(worker, platform) {
    const epoch = state.epoch;
    try {
      const [platforms, config] = await Promise.all([
        channels.platforms.length ? { platforms: channels.platforms } : api("/api/v1/channel/platforms"),
        api(imConfigUrl(worker))]);
      if (epoch !== state.epoch || channels.worker !== worker) return;
      channels.platforms = platforms.platforms;
      channels.stored = config.credentials;
      const bound = config.channels.map((c) => c.type);
      const order = [...channels.platforms].sort((a, b) => (bound.includes(b.platform) ? 1 : 0) - (bound.includes(a.platform) ? 1 : 0));
      const chosen = platform || (order[0] && order[0].platform);
      $("#channel-platform").replaceChildren(...order.map((p) => el("option", { value: p.platform, selected: p.platform === chosen },
        `${label(p.platform)}${bound.includes(p.platform) ? " (bound)" : ""}`)));
      showFields(chosen);
    } catch (error) {
      if (epoch === state.epoch) $("#channel-result").textContent = `Could not load the credentials: ${error.message}`;
    }
  }

  function showFields(platform) {
    const spec = channels.platforms.find((p) => p.platform === platform);
    const stored = channels.stored[platform] || {};
    const inputs = (spec ? spec.fields : []).map((f) => {
      const id = `cred-${f.name}`;
      const isSet = f.secret ? (stored[f.name] === "set" ? "set" : "not set") : null;
      const value = !f.secret && stored[f.name] !== undefined && stored[f.name] !== null ? String(stored[f.name]) : "";
      return el("div", { class: "field" },
        el("label", { for: id }, label(f.name), f.required ? " (required)" : "", f.secret ? el("span", { class: "muted", text: ` · ${isSet}` }) : ""),
        el("input", { id, name: f.name, "data-secret": f.secret, "data-type": f.type, value,
          type: f.secret ? "password" : f.type === "integer" ? "number" : "text", autocomplete: "off",
          placeholder: f.secret ? (isSet === "set" ? "set: type to replace it" : "not set") : "" }));
    });
    const bound = channels.bound.some((b) => b.platform === platform);
    const note = bound ? null : el("p", { class: "muted" }, `No ${label(platform)} channel is bound to this worker yet: add `,
      el("code", { text: `- type: ${platform}` }), " to its channels list in PERSONA.md to use these credentials.");
    $("#channel-fields").replaceChildren(...inputs, ...(note ? [note] : []));
  }

  function update(platform) {
    const stored = channels.stored[platform] || {};
    const fields = {};
    for (const input of document.querySelectorAll("#channel-fields input")) {
      const value = input.value.trim();
      if (input.dataset.secret !== undefined) {
        if (value) fields[input.name] = value;
      } else if (value !== String(stored[input.name] ?? "")) {
        fields[input.name] = value === "" ? null : input.dataset.type === "integer" ? Number(value) : value;
      }
    }
    return fields;
  }

  async function save(event) {
    event.preventDefault();
    const platform = $("#channel-platform").value;
    const fields = update(platform);
    const result = $("#channel-result");
    if (!Object.keys(fields).length) { result.textContent = "Nothing to save: type the fields to set."; return; }
    const epoch = state.epoch;
    const worker = channels.worker;
    $("#channel-save").disabled = true;
    result.textContent = "Saving…";
    try {
      const saved = await api(imConfigUrl(worker), { method: "PUT", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ credentials: { [platform]: fields } }) });
      if (epoch !== state.epoch) return;
      const reload = saved.reload;
      result.textContent = reload.ok ? `Saved the ${label(platform)} credentials; the worker reloaded them.`
        : `Saved, but the worker did not reload: ${reload.errors.map((e) => e.message).join("; ")}`;
      await loadForm(worker, platform);  // the inputs are emptied: only "set" / "not set" is shown
      load();
    } catch (error) {
      if (epoch === state.epoch) result.textContent = `Not saved: ${error.message}`;
    } finally {
      if (epoch === state.epoch) $("#channel-save").disabled = false;
    }
  }

  function testResult(adapterId) {
    const t = channels.results[adapterId];
    if (!t) return "";
    const id = t.identity || {};
    const who = id.user || id.user_id ? ` (bot ${id.user || id.user_id} in ${id.team || id.team_id})` : "";
    const at = t.checked_at ? ` at ${new Date(t.checked_at).toLocaleTimeString()}` : "";
    const text = t.status === "ok" ? `${t.check} answered${who} in ${ms(t.elapsed_ms)}${at}` : `${label(t.failure)}: ${t.error}${at}`;
    return el("div", { class: `test-result ${t.status}` }, badge(t.status), " ", text);
  }

  async function testConnection(adapterId, button) {
    const epoch = state.epoch;
    button.disabled = true;
    say(`Testing ${adapterId}…`);
    try {
      const result = await api(`/api/v1/channel/${encodeURIComponent(adapterId)}/test`, { method: "POST" });
      if (epoch !== state.epoch) return;
      channels.results[adapterId] = result;
      say(result.status === "ok" ? `${adapterId}: connection OK.` : `${adapterId}: ${label(result.failure)}: ${result.error}`);
    } catch (error) {
      if (epoch !== state.epoch) return;
      channels.results[adapterId] = { status: "failed", failure: "error", error: error.message };
      say(`Could not test ${adapterId}: ${error.message}`);
    }
    listBindings(channels.worker, channels.bound);
  }

  function listBindings(worker, list) {
    const host = $("#channel-bindings");
    if (!list.length) {
      host.replaceChildren(muted("No channel is bound to this worker: add one to the channels list in PERSONA.md."));
      return;
    }
    host.replaceChildren(table(["Adapter", "Platform", "Status", "Last delivery", "Connection test"], list.map((c) => [
      el("code", { text: c.adapter_id }), label(c.platform), badge(c.status),
      c.last_delivery ? [badge(c.last_delivery), c.last_error ? el("div", { class: "muted", text: c.last_error }) : null] : "none yet",
      [el("button", { type: "button", class: "test", "aria-label": `Test connection: ${c.adapter_id}`,
        onclick: (e) => testConnection(c.adapter_id, e.currentTarget) }, "Test connection"), testResult(c.adapter_id)]]), "channel-bindings"));
  }
})();
