"""Runs parked by wait_for_event, in the real runtime (LiteLLM to the scripted model, real files):
cancelling or closing the plan ends the parked run, an escalated wait keeps it paused until a
person decides, a continuation that cannot start fails it, and a run asked on Slack gets its
continuation's answer in the same Slack thread exactly once — through the outbound delivery,
against the local stand-in for the Slack API — with the skill the parked run used. After a crash
(the stores as the dead process left them: the plan RUNNING and naming its stopped instance, with
or without its continuation; a plan cancelled before its run) the next start finishes the work
once, and leaves alone a plan a live process is resuming."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient
from slack_sdk.signature import SignatureVerifier

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.duties import route_through
from genworker.autonomy.waiting import WaitingPlan
from genworker.autonomy.waiting.runs import continuation
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor
from genworker.worker.router import RouteError, RouteRequest
from genworker.worker.task import RunRecord, RunRef, RunState
from genworker.workspace.models.base import thaw

T = TypeVar("T")
KEY = "github:pr:42:merged"
SLACK_SECRET = SLACK_SIGNING_SECRET
SKILL = (
    "---\nname: deployer\ndescription: Deploys releases.\nmetadata:\n  genworker:\n"
    "    keywords:\n      - {keyword: deploy, weight: 2.0}\n---\nDo the deploy work.\n"
)


def persona(policy: str = "") -> str:
    return (
        "---\nidentity: {name: Alice, worker_id: alice}\n"
        "channels:\n  - {type: slack, features: {approvers: [U_BOSS]}}\n"
        f"{policy}---\nYou are alice.\n"
    )


@pytest.fixture
def build(small_workspace: Callable[..., Path]) -> Callable[..., Path]:
    def make(policy: str = "") -> Path:
        return small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/workers/alice/PERSONA.md": persona(policy),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                    {"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SECRET}}
                ),
                "tenants/acme/workers/alice/skills/deployer/SKILL.md": SKILL,
            },
        )

    return make


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer, **env: str) -> Iterator[Harness]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    settings = load_settings(tmp_path / "configs", scripted_env(model, **env), workspace=workspace)
    with TestClient(create_app(settings)) as client:
        yield Harness(client, client.app.state.runtime, workspace)  # type: ignore[attr-defined]


class Harness:
    def __init__(self, client: TestClient, runtime: Runtime, workspace: Path) -> None:
        self.client, self.runtime = client, runtime
        self.handled: Handled | None = None  # the channel processor's outcomes, once `slack` posted
        self.headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme', None)[1]}"}

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        return self.client.portal.call(fn)  # type: ignore[union-attr, arg-type, return-value]

    def ask(self, text: str) -> RunRecord:
        router = self.runtime.services.router
        record, _ = self.call(lambda: route_through(router, RouteRequest("acme", "alice", text)))
        return record

    def run(self, run_id: str) -> RunRecord:
        tasks = self.runtime.services.router.tasks
        return self.call(lambda: tasks.get_run(RunRef("acme", "alice", run_id)))

    def plan(self) -> WaitingPlan:
        store = self.runtime.services.waiting.store
        [plan] = self.call(lambda: store.list("acme", "alice"))
        return plan

    def scan(self, at: datetime) -> list[WaitingPlan]:
        waiting = self.runtime.services.waiting
        return self.call(lambda: waiting.scan_once(now=at))

    def slack(self, text: str, ts: str, user: str = "U_PEER") -> str:
        """Post a signed Slack DM (in thread 1700000000.000100) and wait until the processor handled it."""
        if self.handled is None:
            self.handled = Handled()
            self.runtime.services.channels.processor.listeners.append(self.handled)  # type: ignore[attr-defined]
        body, headers = slack_message(text, ts, "1700000000.000100", user)
        assert self.client.post("/api/v1/channel/acme~alice~slack/webhook", content=body, headers=headers).is_success
        return self.handled.wait_for(f"D1:{ts}")[f"D1:{ts}"]

    def cancel(self, plan_id: str) -> dict[str, Any]:
        response = self.client.post(f"/api/v1/workers/alice/waiting/{plan_id}/cancel", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json()["plan"])


def wait_call(**arguments: Any) -> Reply:
    args = {"match_key": KEY, "reason": "the merge has to happen first", **arguments}
    return Reply("I will wait for the merge.", tool_calls=(ToolCallReply("wait_for_event", args, "c1"),))


def test_cancelling_the_plan_cancels_the_parked_run(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call())
    with running(tmp_path, build(), model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        assert parked.state is RunState.PAUSED
        assert h.cancel(h.plan().plan_id)["state"] == "cancelled"
        run = h.run(parked.run_id)
        assert run.state is RunState.CANCELLED
        assert run.history[-1].note.startswith(f"the wait for {KEY} was cancelled by api:")


def test_a_new_threads_first_turn_parks_as_a_conversation_its_session_holding_the_request(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    """The session of a thread the turn started is stored only with that turn, after the tool
    parked it: the plan still knows the thread's history carries the request."""
    model_server.expect(wait_call())
    with running(tmp_path, build(), model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        plan = h.plan()
        assert plan.resume["conversational"] is True and plan.resume["thread_id"] == parked.thread_id
        assert "The task:" not in continuation(plan).text  # the history, not the text, repeats it
        sessions = h.runtime.services.router.sessions
        stored = h.call(lambda: sessions.get_or_create_thread("acme", "alice", parked.thread_id))
        assert [m.content for m in stored.messages][:1] == ["Deploy PR 42 once it is merged."]


def test_an_escalated_wait_keeps_the_run_paused_until_a_person_decides(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call(timeout_s=60))
    with running(tmp_path, build(), model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        first = datetime.now(UTC) + timedelta(minutes=2)
        [reminded] = h.scan(first)  # remind_then_escalate: a reminder, another wait
        assert reminded.state == "waiting" and h.run(parked.run_id).state is RunState.PAUSED
        [escalated] = h.scan(first + timedelta(hours=25))  # then the brief asks a person
        assert escalated.state == "gated" and h.run(parked.run_id).state is RunState.PAUSED
        h.cancel(escalated.plan_id)  # the person's decision ends it
        assert h.run(parked.run_id).state is RunState.CANCELLED


def test_a_wait_closed_after_its_timeout_cancels_the_run(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call(timeout_s=60))
    workspace = build("policy: {waiting_timeout_action: close}\n")
    with running(tmp_path, workspace, model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        [closed] = h.scan(datetime.now(UTC) + timedelta(minutes=2))
        assert closed.state == "closed"
        run = h.run(parked.run_id)
        assert run.state is RunState.CANCELLED
        assert run.history[-1].note == f"the wait for {KEY} timed out and was closed"


def test_a_continuation_that_cannot_start_fails_the_parked_run(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call())
    with running(tmp_path, build(), model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        plan = h.plan()
        broken = replace(plan, resume={**thaw(plan.resume), "thread_id": "../elsewhere"})
        resume = h.runtime.services.waiting.on_resume
        with pytest.raises(RouteError):
            h.call(lambda: resume(broken))
        run = h.run(parked.run_id)
        assert run.state is RunState.FAILED and run.error is not None and run.error.code == "resume_failed"


def slack_message(text: str, ts: str, thread_ts: str, user: str = "U_PEER") -> tuple[bytes, dict[str, str]]:
    event = {"type": "message", "user": user, "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
    body = json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "event": {**event, "thread_ts": thread_ts}})
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SLACK_SECRET).generate_signature(timestamp=stamp, body=body)
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature, "Content-Type": "application/json"}
    return body.encode(), headers


def test_a_slack_run_gets_its_continuation_answer_in_its_thread_once(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    vendor = Vendor()

    def uses_the_deploy_skill(body: dict[str, Any]) -> None:
        assert "Do the deploy work." in json.dumps(body)  # the parked run's skill, not the default one
        assert '"merged_by": "bob"' in str(body["messages"][-1]["content"])

    model_server.expect(wait_call(), Reply("Merged by bob; deployed.", check=uses_the_deploy_skill))
    with (
        LiveServer(vendor.app()) as slack,
        running(tmp_path, build(), model_server, GENWORKER_SLACK_API_BASE=slack.url) as h,
    ):
        assert h.slack("Deploy PR 42 once it is merged.", "1700000001.000200") == "replied"
        [told] = vendor.calls("/chat.postMessage")
        assert told.body["text"] == f"Waiting for {KEY}: the merge has to happen first"
        plan = h.plan()
        assert plan.resume["skill_id"] == "deployer"
        assert plan.resume["reply_to"]["adapter_id"] == "acme~alice~slack"

        vendor.script["/chat.postMessage"] = [(200, {"ok": False, "error": "channel_not_found"}, {})]
        waiting = h.runtime.services.waiting
        assert waiting is not None

        async def event_arrives() -> list[WaitingPlan]:
            woken = await waiting.on_event("acme", KEY, "gh-1", {"merged_by": "bob"})
            await waiting.wait_runs(woken)
            return woken

        [woken] = h.call(event_arrives)  # the run completes; Slack refuses its answer
        assert len(vendor.calls("/chat.postMessage")) == 2
        for _ in range(2):  # the resume retried: nothing runs again, the answer goes out once
            h.call(lambda: waiting.on_resume(woken))
        sent = vendor.calls("/chat.postMessage")
        assert len(sent) == 3
        assert sent[-1].body["text"] == "Merged by bob; deployed."
        assert sent[-1].body["channel"] == "D1" and sent[-1].body["thread_ts"] == "1700000000.000100"
        parked = h.run(str(plan.resume["run_id"]))
        assert parked.state is RunState.SUPERSEDED
        follow_up = h.run(parked.history[-1].note.removeprefix("superseded by "))
        assert follow_up.state is RunState.COMPLETED and follow_up.skill_id == "deployer"
    assert len(model_server.requests) == 2


def test_a_skill_the_worker_no_longer_has_is_left_to_the_matcher(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call(), Reply("Done without it."))
    with running(tmp_path, build(), model_server) as h:
        parked = h.ask("Deploy PR 42 once it is merged.")
        plan = h.plan()
        retired = replace(plan, resume={**thaw(plan.resume), "skill_id": "retired"}, state="running")
        resume = h.runtime.services.waiting.on_resume
        h.call(lambda: resume(retired))
        assert h.run(parked.run_id).state is RunState.SUPERSEDED


def test_a_continuation_that_waits_again_keeps_the_slack_conversation(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    vendor = Vendor()
    again = {"match_key": "ci:build:7:passed", "reason": "the build must pass too"}
    model_server.expect(
        wait_call(),
        Reply("Now the build.", tool_calls=(ToolCallReply("wait_for_event", again, "c2"),)),
        Reply("Built and deployed."),
    )
    with (
        LiveServer(vendor.app()) as slack,
        running(tmp_path, build(), model_server, GENWORKER_SLACK_API_BASE=slack.url) as h,
    ):
        h.slack("Deploy PR 42 once it is merged.", "1700000001.000200")
        waiting = h.runtime.services.waiting
        assert waiting is not None

        async def event_arrives(key: str, event_id: str) -> None:
            await waiting.wait_runs(await waiting.on_event("acme", key, event_id))

        h.call(lambda: event_arrives(KEY, "gh-1"))
        h.call(lambda: event_arrives("ci:build:7:passed", "ci-1"))
        texts = [(c.body["text"], c.body["thread_ts"]) for c in vendor.calls("/chat.postMessage")]
        assert texts == [
            (f"Waiting for {KEY}: the merge has to happen first", "1700000000.000100"),
            ("Waiting for ci:build:7:passed: the build must pass too", "1700000000.000100"),
            ("Built and deployed.", "1700000000.000100"),
        ]


# -- restarts: the stores as a dead process left them, then a new runtime on the workspace ---------

ASK = "Deploy PR 42 once it is merged."


def crash_mid_resume(h: Harness) -> WaitingPlan:
    """What a process leaves when it dies right after moving the plan to RUNNING."""
    waiting, leases = h.runtime.services.waiting, h.runtime.services.leases
    assert waiting is not None and leases is not None
    store, plan = waiting.store, h.plan()
    h.call(lambda: store.resume("acme", KEY, "gh-1", datetime.now(UTC)))
    return h.call(lambda: store.transition(*plan.key, "gated", "running", resumed_by=leases.instance_id))


def restarted(h: Harness, plan: WaitingPlan) -> WaitingPlan:
    """The plan once the new runtime's recovery has finished with it."""
    waiting = h.runtime.services.waiting
    assert waiting is not None
    h.call(lambda: waiting.wait_runs([plan]))
    return h.plan()


def test_a_plan_left_running_without_its_continuation_resumes_at_the_next_start(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call(), Reply("Merged; deployed."))
    workspace = build()
    with running(tmp_path, workspace, model_server) as h:
        parked = h.ask(ASK)
        plan = crash_mid_resume(h)
    with running(tmp_path, workspace, model_server) as h:
        assert restarted(h, plan).state == "done"
        run = h.run(parked.run_id)
        assert run.state is RunState.SUPERSEDED
        follow_up = h.run(run.history[-1].note.removeprefix("superseded by "))
        assert follow_up.state is RunState.COMPLETED and follow_up.provenance.source_id == f"waiting:{plan.plan_id}"
    assert len(model_server.requests) == 2


def test_a_continuation_that_ran_before_the_crash_is_not_run_again_and_slack_hears_it_once(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    vendor = Vendor()
    model_server.expect(wait_call(), Reply("Merged by bob; deployed."))
    workspace = build()
    with LiveServer(vendor.app()) as slack:
        env = {"GENWORKER_SLACK_API_BASE": slack.url}
        with running(tmp_path, workspace, model_server, **env) as h:
            h.slack(ASK, "1700000001.000200")
            plan = crash_mid_resume(h)
            router = h.runtime.services.router
            assert router is not None
            follow_up, _ = h.call(lambda: route_through(router, continuation(plan)))  # then the process died
            assert follow_up.state is RunState.COMPLETED
            assert h.run(str(plan.resume["run_id"])).state is RunState.PAUSED
        for _ in range(2):  # two restarts: the answer goes out once
            with running(tmp_path, workspace, model_server, **env) as h:
                assert restarted(h, plan).state == "done"
                parked = h.run(str(plan.resume["run_id"]))
                assert (parked.state, parked.history[-1].note) == (
                    RunState.SUPERSEDED, f"superseded by {follow_up.run_id}"
                )  # fmt: skip
    texts = [(c.body["text"], c.body["thread_ts"]) for c in vendor.calls("/chat.postMessage")]
    assert texts == [
        (f"Waiting for {KEY}: the merge has to happen first", "1700000000.000100"),
        ("Merged by bob; deployed.", "1700000000.000100"),
    ]
    assert len(model_server.requests) == 2


def test_a_live_process_resuming_the_plan_is_left_alone(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call())
    workspace = build()
    with running(tmp_path, workspace, model_server) as first:
        first.ask(ASK)
        plan = crash_mid_resume(first)  # not a crash: `first` is alive and holds its lease
        (tmp_path / "second").mkdir()
        with running(tmp_path / "second", workspace, model_server) as second:
            assert second.plan() == plan
        assert first.plan() == plan  # the second process stopped without touching it
    assert len(model_server.requests) == 1


def test_a_crash_between_cancelling_the_plan_and_its_run_is_finished_at_the_next_start(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    model_server.expect(wait_call())
    workspace = build()
    with running(tmp_path, workspace, model_server) as h:
        parked = h.ask(ASK)
        store, plan = h.runtime.services.waiting.store, h.plan()
        h.call(lambda: store.transition(*plan.key, "waiting", "cancelled"))  # then the process died
        assert h.run(parked.run_id).state is RunState.PAUSED
    with running(tmp_path, workspace, model_server) as h:
        run = h.run(parked.run_id)
        assert (run.state, run.history[-1].note) == (RunState.CANCELLED, f"the wait for {KEY} was cancelled")


# -- the IM commands for waits, through Slack and the real command backend ----------------------


def test_im_commands_list_cancel_and_resume_waits(
    tmp_path: Path, build: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    vendor = Vendor()
    model_server.expect(wait_call(), wait_call(), Reply("Merged; deployed."))
    with (
        LiveServer(vendor.app()) as slack,
        running(tmp_path, build(), model_server, GENWORKER_SLACK_API_BASE=slack.url) as h,
    ):
        stamps = iter(range(1, 100))

        def say(text: str, user: str = "U_BOSS") -> str:
            h.slack(text, f"17000000{next(stamps):02d}.000200", user)
            return str(vendor.calls("/chat.postMessage")[-1].body["text"])

        say(ASK, "U_PEER")
        say("Deploy PR 42 too, once it is merged.", "U_PEER")
        waiting, store = h.runtime.services.waiting, h.runtime.services.waiting.store
        first, second = h.call(lambda: store.list("acme", "alice"))
        assert say("/waits", "U_PEER") == "Sorry, only this worker's owner or approvers may do that."
        listing = say("/waits")
        assert listing.startswith("Waiting plans (2):") and f"- {first.plan_id}: {KEY}, times out at " in listing
        assert "No item with id 'wait_nope'" in say("/cancel_wait wait_nope")

        assert say(f"/cancel_wait {second.plan_id}") == f"Wait {second.plan_id} cancelled."
        run = h.run(str(second.resume["run_id"]))
        assert (run.state, run.history[-1].note) == (
            RunState.CANCELLED,
            f"the wait for {KEY} was cancelled by slack:U_BOSS",
        )

        before = len(vendor.calls("/chat.postMessage"))
        h.slack(f"/resume_wait {first.plan_id}", f"17000000{next(stamps):02d}.000200", "U_BOSS")
        h.call(lambda: waiting.wait_runs([first]))
        # the command's reply and the continued run's answer (in the asking thread), in either order
        posted = sorted(str(c.body["text"]) for c in vendor.calls("/chat.postMessage")[before:])
        assert posted == ["Merged; deployed.", f"Wait {first.plan_id} resumed: its work continues now."]
        assert h.run(str(first.resume["run_id"])).state is RunState.SUPERSEDED
        assert say(f"/resume_wait {first.plan_id}").startswith(f"Cannot do that: plan {first.plan_id} is done")
        assert say("/waits") == "Waiting plans: none."

        backend = h.runtime.services.command_backend
        assert backend is not None
        with pytest.raises(LookupError):  # another worker's (or tenant's) ids are unknown here
            h.call(lambda: backend.cancel_wait("acme", "bob", first.plan_id, "slack:U_BOSS"))
