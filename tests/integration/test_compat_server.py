"""The real server on each compat corpus workspace (tests/fixtures/compat/, copied): every worker
answers one chat turn over /api/v1/chat/stream and runs each of its duties by hand, the model being
the scripted one over LiteLLM.

What each run must end as is written next to it: completed, or the refusal a file asks for (a
closed or paused duty is blocked, an inline pre_script needs trust level 2). A duty run that serves a
goal task is judged by the goal evaluator (one more model call), and a met verdict moves the task in
the goal file, in the file's spelling. Every WARNING the server logs must be one the corpus README
lists under "Warnings when served", and the runtime state upstream left in the workspace is still
there, byte for byte.

The tools the corpus's pre_scripts call (`sql_executor`, `web_search`) are no builtin here: as an
operator would (script tools or an MCP server), the test supplies them as script tools.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import frontmatter
import httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.goals import GOAL_EVALUATED
from genworker.bus.models import Event
from genworker.settings import load_settings
from genworker.testing import LiveServer, Reply, ScriptedModelServer, ToolCallReply, scripted_env

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "compat"

SCRIPT_TOOLS = {
    "sql_executor": "Run a read-only SQL query on the warehouse.",
    "web_search": "Search the web.",
}
TOOL_SCRIPT = """\
import json, sys
args = json.load(sys.stdin)
print(f"{name}: 3 rows for {{args.get('query', '')!r}}")
"""

# what upstream leaves in a workspace at run time (the corpus README's list): read by nothing here, never rewritten
UPSTREAM_STATE = (
    "tenants/*/sessions/*.json",
    "tenants/*/workers/*/duties/*/execution_log.jsonl",
    "tenants/*/workers/*/sensor_snapshots/*.json",
    "tenants/*/workers/*/tasks/active/*.json",
    "tenants/*/workers/*/runs/*/*/checkpoint_*.json",
    "tenants/*/workers/*/runtime/heartbeat_meta.json",
    "tenants/*/workers/*/runtime/inbox.json",
    "tenants/*/workers/*/memory/episodes/*.md",
)

# (logger, pattern): the corpus README's "Warnings when served", in its order.
EXPECTED_WARNINGS = (
    ("genworker.tools", r"skills name tools this worker does not have \("),
    ("genworker.sensing", r"feishu_folder will not run: feishu_folder sensors .* are not supported"),
    ("genworker.sensing", r"email will not run: CHANNEL_CREDENTIALS.json has no email.worker_imap_host"),
    ("genworker.sensing", r"sensor_snapshots/email.json holds another runtime's snapshot \(no schema_version\)"),
    ("genworker.sensing", r"poll failed: (watched folder|repository) '[^']+' does not exist under the worker folder"),
    ("genworker.worker", r"duty skill 'not-installed-skill' is not a skill of lenient/legacy"),
    # offline: the vendors' long-connection endpoints and the example.com mail hosts are out of reach
    ("genworker.channels.longconn", r"long connection failed|open connection failed"),
    ("genworker.sensing", r"email poll failed: IMAP imap\.example\.com:993: "),
    ("genworker.channels", r"email polling of \S+ failed: .*IMAP imap\.example\.com:993: "),
)


def sees(*texts: str) -> Callable[[dict[str, Any]], None]:
    """A request check: the messages sent to the model contain every text."""

    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        missing = [t for t in texts if t not in sent]
        assert not missing, f"the model was not shown {missing}"

    return check


@dataclass(frozen=True)
class Chat:
    worker: str
    message: str
    replies: tuple[Reply, ...]
    skill: str


@dataclass(frozen=True)
class Duty:
    worker: str
    duty_id: str
    replies: tuple[Reply, ...] = ()
    error: tuple[str, str] | None = None  # (code, part of the message): the run fails with it
    serves: tuple[str, str] | None = None  # (goal_id, task_id): the completed run is judged against it
    judged: tuple[int, int, int] = (0, 0, 0)  # the duty's quality criteria, audit evidence and escalation
    # conditions written in words: a completed run's evaluator turn judges them (docs/duties.md, "The contract")


MET = {"verdict": "met", "reasons": ["the reminder went out"], "evidence": ["output"]}


def evaluator(criteria: int, evidence: int, conditions: int) -> Reply:
    """The duty contract's evaluator turn: every criterion met, all evidence present, no condition holding."""
    return Reply(json.dumps({
        "criteria": [{"n": n, "met": True} for n in range(1, criteria + 1)],
        "evidence": [{"n": n, "present": True} for n in range(1, evidence + 1)],
        "conditions": [{"n": n, "holds": False} for n in range(1, conditions + 1)],
    }))  # fmt: skip


def replies_of(run: Chat | Duty) -> tuple[Reply, ...]:
    """The model's part of a run, with the contract's evaluator turn after a completed duty run and the
    goal evaluator's call after a run that serves a goal task."""
    if not isinstance(run, Duty) or run.error is not None:
        return run.replies
    judged = (evaluator(*run.judged),) if any(run.judged) else ()
    goal = (Reply(tool_calls=(ToolCallReply("goal_verdict", MET),)),) if run.serves is not None else ()
    return (*run.replies, *judged, *goal)


def answer(text: str, *shown: str) -> Reply:
    return Reply(text, check=sees(*shown))


RUNS: dict[str, tuple[str, tuple[Chat | Duty, ...]]] = {
    "upstream_full": (
        "acme",
        (
            Chat(
                "analyst",
                "Which tables failed last night's checks?",
                (
                    Reply(tool_calls=(ToolCallReply("sql_executor", {"query": "select * from quality.failed"}),)),
                    answer("fin_orders failed its freshness check.", "sql_executor: 3 rows for 'select"),
                ),
                skill="data-analysis",
            ),
            Duty(
                "analyst",
                "daily-quality-watch",  # inline pre_script (trust 2), depth standard, manual trigger's description
                (
                    answer(
                        "No new issues.",
                        "Trigger: manual (Run it from the dashboard or a command)",
                        "Execution depth: standard",
                        '[pre_script output]\\n{\\"checked\\": true}',
                    ),
                ),
                judged=(3, 0, 1),
            ),
            Duty(
                "analyst",
                "incident-followup",  # pre_script as a tool call; no manual trigger: its first one
                (answer("Follow-up note written.", "sql_executor: 3 rows for 'select count(*) from quality.open"),),
                judged=(1, 0, 0),
            ),
            Duty("analyst", "weekly-report", error=("governance_blocked", "duty 'weekly-report' is closed")),
            Chat(
                "support-desk",
                "How fresh is the finance mart?",
                (answer("Refreshed nightly at 02:00.", "You answer questions about the Acme data platform"),),
                skill="general-query",
            ),
            Duty(
                "support-desk",
                "faq-refresh",
                (answer("Two FAQ entries proposed.", "Refresh the FAQ"),),
                judged=(1, 0, 0),
            ),
            Chat(
                "teammate",
                "Is the ingestion pipeline green?",
                (answer("Yes, all green.", "You are a member of the data platform team"),),
                skill="general-chat",
            ),
        ),
    ),
    "seed_style": (
        "demo",
        (
            Chat(
                "assistant",
                "帮我整理一下收件箱里的审批邮件",
                (answer("审批：2 封", "把每封邮件归入"), answer("已整理待办。", "对审批和会议类邮件")),
                skill="inbox-triage",
            ),
            Duty(
                "assistant",
                "approval-reminder",  # the goal q2-expense-cycle's task m2-t1 names this duty
                # its contract's output_schema is an object: the result is JSON
                (
                    answer("审批：1 封", "把每封邮件归入"),
                    answer('{"pending": ["差旅报销 #12"]}', "汇总收件箱和飞书中的待审批事项"),
                ),
                serves=("q2-expense-cycle", "m2-t1"),
                judged=(2, 2, 2),
            ),
            # TENANT.json says trust_level 1: an inline pre_script needs 2 (the check warns about it)
            Duty("assistant", "meeting-minutes", error=("pre_script_failed", "pre-scripts need trust level 2")),
            Chat(
                "hr-service",
                "年假怎么计算？",
                (answer("按工龄计算。", "你是人力资源部的员工服务台"),),
                skill="meeting-notes",  # the tenant skill PERSONA.md names as default_skill
            ),
            Duty("hr-service", "policy-faq", (answer("已整理。", "每月整理一次员工常问的问题"),), judged=(1, 0, 0)),
        ),
    ),
    "upstream_lenient": (
        "lenient",
        (
            Chat(
                "legacy",
                "Please look up the invoice policy.",
                (answer("Invoices are due in 30 days.", "A worker written the loose way"),),
                skill="legacy-lookup",
            ),
            Duty("legacy", "20260101", error=("governance_blocked", "duty '20260101' is paused")),
            Duty(
                "legacy",
                "unbound-skill",  # an unknown skill_id: the duty runs with the skill that matches
                (answer("Done.", "web_search: 3 rows for ''", "Upstream does not check skill references"),),
                judged=(1, 0, 0),
            ),
        ),
    ),
}


@pytest.fixture
def script_tools(tmp_path: Path) -> Path:
    folder = tmp_path / "script-tools"
    folder.mkdir()
    for name, description in SCRIPT_TOOLS.items():
        (folder / f"{name}.py").write_text(TOOL_SCRIPT.format(name=name), encoding="utf-8")
        declaration = (
            f"schema_version: 1\ndescription: {description}\n"
            "parameters: {type: object, properties: {query: {type: string}}}\neffect: read\n"
        )
        (folder / f"{name}.yaml").write_text(declaration, encoding="utf-8")
    return folder


def unexpected_warnings(records: list[logging.LogRecord]) -> list[str]:
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in records
        if r.levelno >= logging.WARNING
        and not any(r.name == name and re.search(pattern, r.getMessage()) for name, pattern in EXPECTED_WARNINGS)
    ]


def upstream_state(workspace: Path) -> dict[str, bytes]:
    return {p.relative_to(workspace).as_posix(): p.read_bytes() for g in UPSTREAM_STATE for p in workspace.glob(g)}


def workers_of(workspace: Path, tenant: str) -> set[str]:
    return {p.parent.name for p in (workspace / "tenants" / tenant / "workers").glob("*/PERSONA.md")}


def duties_of(http: httpx.Client, worker: str) -> set[str]:
    listing = http.get(f"/workers/{worker}/duties")
    assert listing.status_code == 200, listing.text
    return {d["duty_id"] for d in listing.json()["duties"]}


def chat_turn(http: httpx.Client, chat: Chat) -> dict[str, Any]:
    with http.stream("POST", "/chat/stream", json={"worker_id": chat.worker, "message": chat.message}) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
        run_id = response.headers["X-Run-Id"]
    assert [e["type"] for e in events][-1] == "RUN_FINISHED", events[-1]
    return dict(http.get(f"/workers/{chat.worker}/runs/{run_id}").json())


def duty_run(http: httpx.Client, duty: Duty) -> dict[str, Any]:
    fired = http.post(f"/workers/{duty.worker}/duties/{duty.duty_id}/run")
    assert fired.status_code == 200, fired.text
    run = dict(http.get(f"/workers/{duty.worker}/runs/{fired.json()['run']['run_id']}").json())
    executions = http.get(f"/workers/{duty.worker}/duties/{duty.duty_id}/executions").json()["executions"]
    assert [e["state"] for e in executions] == [run["state"]]
    return run


def ended_as(run: dict[str, Any]) -> tuple[str, str | None, str]:
    error = run["error"]
    return run["state"], error["code"] if error else None, run["provenance"]["governance_decision"]["posture"]


@dataclass(frozen=True)
class Served:
    http: httpx.Client
    evaluated: queue.Queue[dict[str, Any]]  # the payload of each goal.evaluated event


@contextmanager
def api(tmp_path: Path, workspace: Path, tenant: str, model: ScriptedModelServer, tools: Path) -> Iterator[Served]:
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant)[1]}"}
    (tmp_path / "configs").mkdir()
    app = create_app(
        load_settings(tmp_path / "configs", scripted_env(model, SCRIPT_TOOL_DIR=str(tools)), workspace=workspace)
    )
    evaluated: queue.Queue[dict[str, Any]] = queue.Queue()

    async def on_evaluated(event: Event) -> None:  # on the server's loop
        evaluated.put(dict(event.payload))

    with (
        LiveServer(app) as server,
        httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=120) as http,
    ):
        runtime = app.state.runtime
        runtime.services.bus.subscribe(GOAL_EVALUATED, on_evaluated)  # a list append: safe from this thread
        yield Served(http, evaluated)


def assert_met(served: Served, duty: Duty, record: dict[str, Any], tenant_dir: Path) -> None:
    """The runtime judged the run against its goal task ("met"), and moved the task in the goal file in
    the file's own spelling (`completed`, as upstream writes it)."""
    assert duty.serves is not None
    goal_id, task_id = duty.serves
    verdict = served.evaluated.get(timeout=60)
    assert (verdict["goal_id"], verdict["task_id"], verdict["run_id"]) == (goal_id, task_id, record["run_id"])
    assert verdict["goal_status"] == "met"
    run = served.http.get(f"/workers/{duty.worker}/runs/{record['run_id']}").json()
    assert run["goal_status"] == "met"
    goal = frontmatter.loads((tenant_dir / f"workers/{duty.worker}/goals/{goal_id}.md").read_text(encoding="utf-8"))
    tasks = {t["id"]: t["status"] for m in goal["milestones"] for t in m["tasks"]}
    assert tasks[task_id] == "completed"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_worker_chats_and_runs_each_of_its_duties(
    name: str,
    tmp_path: Path,
    script_tools: Path,
    model_server: ScriptedModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="genworker")
    tenant, runs = RUNS[name]
    workspace = Path(shutil.copytree(CORPUS / name, tmp_path / "workspace"))
    model_server.expect(*(reply for run in runs for reply in replies_of(run)))
    left_by_upstream = upstream_state(CORPUS / name)
    with api(tmp_path, workspace, tenant, model_server, script_tools) as served:
        http = served.http
        workers = workers_of(workspace, tenant)
        assert {r.worker for r in runs if isinstance(r, Chat)} == workers  # one chat turn per worker
        for worker in workers:
            assert {r.duty_id for r in runs if isinstance(r, Duty) and r.worker == worker} == duties_of(http, worker)
        for run in runs:
            if isinstance(run, Chat):
                record = chat_turn(http, run)
                assert record["skill_id"] == run.skill
            else:
                record = duty_run(http, run)
            if isinstance(run, Duty) and run.error is not None:
                code, said = run.error
                assert ended_as(record)[:2] == ("failed", code) and said in record["error"]["message"], record
            else:
                assert ended_as(record) == ("completed", None, "normal"), record
                assert record["deliverables"][0]["content"] == run.replies[-1].text
            if isinstance(run, Duty) and run.serves is not None:
                assert_met(served, run, record, workspace / "tenants" / tenant)
    assert unexpected_warnings(caplog.records) == []
    assert {rel: (workspace / rel).read_bytes() for rel in left_by_upstream} == left_by_upstream


def test_a_tenant_without_trust_level_is_served_at_trust_0(
    tmp_path: Path, script_tools: Path, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Trust level 0 when TENANT.json does not say (upstream's default): a conversation may only read and
    compute (posture degraded), a duty only prepares proposals (proposal_only); both still complete."""
    caplog.set_level(logging.INFO, logger="genworker")
    workspace = Path(shutil.copytree(CORPUS / "upstream_lenient", tmp_path / "workspace"))
    tenant_file = workspace / "tenants/lenient/TENANT.json"
    tenant = json.loads(tenant_file.read_text(encoding="utf-8"))
    del tenant["trust_level"]
    tenant_file.write_text(json.dumps(tenant), encoding="utf-8")
    _, runs = RUNS["upstream_lenient"]
    chat, paused, unbound = runs
    assert isinstance(chat, Chat) and isinstance(paused, Duty) and isinstance(unbound, Duty)
    model_server.expect(*replies_of(chat), *replies_of(unbound))
    with api(tmp_path, workspace, "lenient", model_server, script_tools) as served:
        http = served.http
        assert ended_as(chat_turn(http, chat)) == ("completed", None, "degraded")
        assert ended_as(duty_run(http, unbound)) == ("completed", None, "proposal_only")
        assert ended_as(duty_run(http, paused))[:2] == ("failed", "governance_blocked")
    assert unexpected_warnings(caplog.records) == []
