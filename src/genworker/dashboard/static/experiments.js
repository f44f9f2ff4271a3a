// The console's experiments pages (docs/experiments.md), read from the tenant-scoped experiments API:
//   #/workers/{w}/experiments        the worker's experiments, newest first, with their state and winner
//   #/workers/{w}/experiments/{id}   one experiment: its question, its variants side by side (settings, run,
//                                    each check, score, tokens, run time, supervisor comments and what
//                                    they cite), the winner (only ever a variant that succeeded) or why
//                                    there is none, the candidate file, and a bar chart of the scores
// Registered like pages.js's pages (WORKER_PAGES, its own section, a link under "More" on the worker's
// page). Uses dashboard.js's helpers (el, api, state, table, badge, ...) and charts.js; its own names stay
// inside one function scope.
(() => {
  "use strict";

  const TITLE = "Experiments";

  Object.assign(LABELS, {
    awaiting_review: "Awaiting a person's review", rejected: "Rejected", running: "Running",
    succeeded: "Succeeded", interrupted: "Interrupted", winner: "Winner", passed: "Passed",
    contains: "Contains", not_contains: "Does not contain", regex: "Matches", max_chars: "At most characters",
    max_tool_calls: "At most tool calls", max_tokens: "At most tokens",
  });
  const LIMITS = { max_chars: "characters", max_tool_calls: "tool calls", max_tokens: "tokens" };

  function url(worker, path = "") { return `/api/v1/workers/${encodeURIComponent(worker)}/experiments${path}`; }
  function link(worker, id, text) {
    return el("a", { href: `#/workers/${encodeURIComponent(worker)}/experiments/${encodeURIComponent(id)}` }, text || id);
  }

  WORKER_PAGES.experiments = {
    title: TITLE, items: true,
    source: (r) => url(r.worker, r.item ? `/${encodeURIComponent(r.item)}` : ""),
  };
  $("#view-missing").before(el("section", { id: "view-experiments", class: "view", "data-view": "experiments",
    "aria-labelledby": "h-experiments", hidden: true }, el("h2", { id: "h-experiments", text: TITLE }), el("div", { class: "content" })));

  const workerPage = PAGES.worker;  // the link under "More" (pages.js's line), or a line of its own
  PAGES.worker = function workerWithExperiments(data, r) {
    workerPage(data, r);
    const to = el("a", { href: `#/workers/${encodeURIComponent(r.worker)}/experiments`, text: TITLE });
    const more = $("#view-worker .worker-head .content .page-links");
    if (more) more.append(" · ", to);
    else $("#view-worker .worker-head .content").append(el("p", { class: "page-links" }, "More: ", to));
  };

  PAGES.experiments = function experimentsPage(data, r) {
    if (r.item) { one(data.experiment, r); return; }
    $("#h-experiments").textContent = `${TITLE} of ${r.worker}`;
    const rows = data.experiments.map((e) => [link(r.worker, e.experiment_id, el("code", { text: e.experiment_id })),
      clip(e.question, 120), badge(e.state), e.variants.join(", "), e.winner || "None", when(e.created_at)]);
    $("#view-experiments .content").replaceChildren(
      el("p", {}, "Experiments of ", workerLink(r.worker), ": one question tried in several ways, each variant in its own ",
        "read-only run, scored by one protocol. Create one with the API or ", el("code", { text: "genworker experiment" }), "."),
      rows.length ? table(["Experiment", "Question", "State", "Variants", "Winner", "Created"], rows, "experiments-list")
        : muted("No experiments yet."));
  };

  function check(c) {
    const what = LIMITS[c.kind] ? `At most ${num(c.value)} ${LIMITS[c.kind]}` : `${label(c.kind)} “${c.value}”`;
    return el("li", {}, badge(c.passed ? "passed" : "failed"), ` ${what}`, c.required === false ? el("span", { class: "muted", text: " (optional)" }) : "");
  }

  function settings(v) {
    const rows = [["Skill", v.skill || "The one the question matches"], ["Tier", v.tier ? label(v.tier) : "By the run's depth"],
      ["Tools", v.tools ? (v.tools.length ? v.tools.join(", ") : "None") : "The worker's tools"]];
    if (v.instructions) rows.push(["Instructions", clip(v.instructions, 160)]);
    return el("dl", { class: "variant-settings" }, rows.flatMap(([k, text]) => [el("dt", { text: k }), el("dd", { text })]));
  }

  function comments(list) {
    if (!list.length) return "None";
    return el("ul", {}, list.map((d) => el("li", {}, badge(d.action), ` ${d.reason || label(d.check)}`,
      (d.cites || []).length ? el("span", { class: "muted" }, " Cites ", ...(d.cites.map((c, i) => [i ? ", " : "", el("code", { text: c })]).flat())) : "")));
  }

  function one(e, r) {
    $("#h-experiments").textContent = `Experiment ${e.experiment_id} of ${r.worker}`;
    const results = Object.fromEntries(e.variants.map((v) => [v.name, v]));
    const names = Object.keys(e.spec.variants);
    const rows = names.map((name) => {
      const v = results[name] || { name };
      const ev = v.evaluation;
      const run = v.run_id ? el("span", {}, runLink(r.worker, v.run_id), " ", badge(v.run_state || "pending")) : "Not run";
      const why = ev && !ev.success ? (ev.reason || v.error || "") : (v.error || "");
      return [el("span", {}, el("strong", { text: name }), name === e.winner ? badge("winner") : "",
        ev ? badge(ev.success ? "succeeded" : "failed") : ""),
      settings(e.spec.variants[name]), run,
      ev && ev.checks.length ? el("ul", { class: "checks" }, ev.checks.map(check)) : "No checks",
      ev ? ev.score.toFixed(2) : "n/a", ev ? num(ev.metrics.tokens) : "n/a", ev ? ms(ev.metrics.run_ms) : "n/a",
      ev ? comments(ev.supervisor) : "None", why ? el("span", { class: "reason", text: why }) : "None"];
    });
    const outcome = e.winner
      ? el("p", { class: "outcome" }, "Winner: ", el("strong", { text: e.winner }), ", the best of the variants that succeeded.")
      : el("p", { class: "outcome reason" }, `No winner${e.reason ? `: ${e.reason}` : ["running", "awaiting_review"].includes(e.state) ? " yet." : "."}`);
    const candidate = e.candidate
      ? el("p", {}, "Candidate: ", el("code", { text: e.candidate.path }), e.candidate.production ? [" beside ", el("code", { text: e.candidate.production })] : "",
        ". Production is untouched until a person adopts it.")
      : muted("No candidate file.");
    const evals = names.map((n) => (results[n] && results[n].evaluation) || null);
    const score = (ev, ok) => (ev && ev.success === ok ? ev.score : 0);  // one bar a variant, coloured by its outcome
    const chart = Charts.bars({ title: "Score per variant", labels: names, stacked: true, format: (n) => n.toFixed(2),
      series: [{ name: "Succeeded", values: evals.map((ev) => score(ev, true)) },
        { name: "Failed", cls: "bad", values: evals.map((ev) => score(ev, false)) }] });
    chart.querySelector("svg").setAttribute("aria-label", `Score per variant: ${names.map((n, i) => `${n} ${evals[i]
      ? `${evals[i].score.toFixed(2)}${evals[i].success ? "" : " (failed)"}` : "not scored"}`).join(", ")}`);
    chart.querySelector("details th").textContent = "Variant";
    chart.querySelectorAll("details td[data-label='Day']").forEach((td) => { td.dataset.label = "Variant"; });
    $("#view-experiments .content").replaceChildren(
      el("p", {}, link(r.worker, "", "All experiments"), " of ", workerLink(r.worker), "."),
      dl([["State", badge(e.state)], ["Created", when(e.created_at)], ["By", e.created_by]]),
      section("Question", el("p", { class: "question", text: e.spec.question })),
      section("Outcome", outcome, candidate),
      section("Variants", table(["Variant", "Settings", "Run", "Checks", "Score", "Tokens", "Run time", "Supervisor", "Why it failed"],
        rows, "experiment-variants")),
      section("Scores", chart));
  }
})();
