"""Three `genworker run` processes behind nginx hand work over (issue #30): a rolling restart under a
steady chat load fails no request a process accepted; a scheduled duty's slots run once each; a
process killed mid-run leaves its worker's autonomy to another process within one lease ttl, its
run `interrupted` and not replayed."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.settings import load_settings
from genworker.testing import Hang, Reply, When

from .conftest import DEADLINE_S, POST, WEBHOOK, Cluster, Process, journal, slack_dm, until

LOAD_CLIENTS = 2


@dataclass
class Outcome:
    accepted: bool  # a process answered 200 and started the run
    finished: bool  # ... and the stream ended with RUN_FINISHED and the scripted answer
    detail: str = ""


def turn(client: httpx.Client, cluster: Cluster, text: str, expected: str) -> Outcome:
    """One chat turn; a request no process accepted (nginx's 502, a refused connection) is `accepted=False`."""
    body = {"worker_id": "analyst", "message": text}
    try:
        with client.stream("POST", "/api/v1/chat/stream", json=body, headers=cluster.auth) as response:
            if response.status_code != 200:
                return Outcome(False, False, f"{response.status_code} {response.read()[:200]!r}")
            try:
                lines = [line for line in response.iter_lines() if line.startswith("data:")]
            except httpx.TransportError as exc:
                return Outcome(True, False, f"stream cut: {exc!r}")
    except httpx.TransportError as exc:
        return Outcome(False, False, f"no answer: {exc!r}")
    events = [json.loads(line[5:]) for line in lines]
    text_out = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    finished = bool(events) and events[-1]["type"] == "RUN_FINISHED" and text_out == expected
    return Outcome(True, finished, "" if finished else f"events {[e['type'] for e in events]}, text {text_out!r}")


def answered(client: httpx.Client, cluster: Cluster, text: str, expected: str) -> Outcome:
    """`turn` again while no process accepts it, as a client would retry a 502 or 503."""
    while not (outcome := turn(client, cluster, text, expected)).accepted:
        pass
    return outcome


@dataclass
class Load:
    """Chat turns through nginx from a few clients in a loop, each message scripted just before it is
    sent; a turn no process accepted is sent again until one does."""

    cluster: Cluster
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    outcomes: list[Outcome] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def client(self, index: int) -> None:
        with httpx.Client(base_url=self.cluster.nginx_url, timeout=DEADLINE_S) as client:
            n = 0
            while not self.stop.is_set():
                text, expected = f"[load {index}/{n}]", f"ok {index}/{n}"
                self.cluster.model.expect(When(text, Reply(expected)))
                while not (outcome := turn(client, self.cluster, text, expected)).accepted:
                    with self.lock:
                        self.refused.append(outcome.detail)
                with self.lock:
                    self.outcomes.append(outcome)
                n += 1

    def finished(self) -> int:
        with self.lock:
            return sum(o.finished for o in self.outcomes)


@contextmanager
def steady(load: Load) -> Iterator[None]:
    """The load's clients run until the block ends."""
    with ThreadPoolExecutor(LOAD_CLIENTS) as pool:
        clients = [pool.submit(load.client, i) for i in range(LOAD_CLIENTS)]
        try:
            yield
        finally:
            load.stop.set()
            for client in clients:
                client.result()


def run_states(cluster: Cluster, worker: str = "analyst") -> list[str]:
    folder = cluster.workspace / f"tenants/demo/workers/{worker}/runs"
    return [json.loads(p.read_text(encoding="utf-8"))["state"] for p in folder.glob("*.json")]


def model_saw(cluster: Cluster, text: str) -> bool:
    return any(text in json.dumps(r.get("messages", []), ensure_ascii=False) for r in list(cluster.model.requests))


def test_a_process_that_is_shutting_down_is_not_ready_at_once(demo_workspace: Path, tmp_path: Path) -> None:
    """`genworker run` drains its runtime on SIGTERM (cli/serve.py); from that moment /readiness says 503."""
    settings = load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=demo_workspace)
    with TestClient(create_app(settings)) as client:
        assert "shutting_down" not in codes(client.get("/readiness").json())
        client.portal.call(client.app.state.runtime.drain, 0)  # type: ignore[union-attr,attr-defined]
        answer = client.get("/readiness")
        assert answer.status_code == 503
        assert codes(answer.json())[0] == "shutting_down"


def codes(readiness: dict[str, Any]) -> list[str]:
    return [reason["code"] for reason in readiness["reasons"]]


def test_a_rolling_restart_under_chat_load_fails_no_accepted_request(cluster: Cluster) -> None:
    """Each process in turn gets a SIGTERM while one of its chat streams is open (its answer held by
    the model until another process has taken a turn), exits 0 once that stream has finished, and is
    started again. Meanwhile three clients chat through nginx without pause."""
    before = run_states(cluster)
    load = Load(cluster)
    with steady(load):
        until(lambda: load.finished() >= LOAD_CLIENTS, "the load to get going", cluster.check_alive)
        restart_each(cluster, load)
    failed = [o.detail for o in load.outcomes if not o.finished]
    assert failed == [], f"{len(failed)} accepted chat turns failed: {failed[:5]}"
    cluster.model.assert_done()  # every scripted turn was asked once: nothing ran twice
    # a run for every turn a client saw accepted (and the held and releasing turns), none for a refused one
    made = Counter(run_states(cluster)) - Counter(before)
    assert made == {"completed": len(load.outcomes) + 2 * len(cluster.processes)}
    print(f"rolling restart: {len(load.outcomes)} turns finished; refused and sent again: {load.refused}")


def restart_each(cluster: Cluster, load: Load) -> None:
    for index in range(len(cluster.processes)):
        old = cluster.processes[index]
        hold, release = f"[hold {index}]", f"[release {index}]"
        cluster.model.expect(When(hold, Reply(f"held {index}"), meet=release), When(release, Reply(f"freed {index}")))
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(turn, cluster.client(old.url), cluster, hold, f"held {index}")
            until(lambda h=hold: model_saw(cluster, h), f"{hold} to reach the model", cluster.check_alive)
            old.popen.send_signal(signal.SIGTERM)
            # the open stream goes on; the turn that releases it is served by another process
            freed = answered(cluster.client(cluster.nginx_url), cluster, release, f"freed {index}")
            assert freed.finished, freed.detail
            outcome = held.result()
        assert outcome.finished, f"the stream open on process {index} at its SIGTERM: {outcome.detail}"
        assert old.popen.wait(DEADLINE_S) == 0, old.log.read_text(encoding="utf-8")[-3000:]
        before = load.finished()
        cluster.restart(index)
        until(lambda b=before: load.finished() >= b + LOAD_CLIENTS, "the load to go on", cluster.check_alive)


def slots(count: int, gap_s: int, lead_s: int) -> list[datetime]:
    """`count` whole-second UTC times `gap_s` apart in one minute, the first at least `lead_s` from now."""
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead_s + 1)
    if first.second + gap_s * (count - 1) > 59:  # a cron's seconds list repeats every minute: stay in one
        first = first.replace(second=0) + timedelta(minutes=1)
    return [first + timedelta(seconds=gap_s * i) for i in range(count)]


def add_duty(cluster: Cluster, duty_id: str, at: list[datetime], text: str) -> None:
    """A duty of analyst's with a six-field cron (seconds first) firing at exactly `at`, loaded by every process."""
    first = at[0]
    seconds = ",".join(str(t.second) for t in at)
    cron = f"{seconds} {first.minute} {first.hour} {first.day} {first.month} *"
    trigger = f"{{id: t, type: schedule, cron: '{cron}'}}"
    # no quality criteria or escalation from analyst's duty defaults: no evaluator turn after the run
    front = f"duty_id: {duty_id}\ntitle: {duty_id}\nquality_criteria: []\nescalation: null\ntriggers: [{trigger}]"
    duty = f"---\n{front}\n---\n{text}\n"
    (cluster.workspace / f"tenants/demo/workers/analyst/duties/{duty_id}.md").write_text(duty, encoding="utf-8")
    for process in cluster.processes:
        if process.popen.poll() is None:
            reloaded = httpx.post(
                process.url + "/api/v1/worker/ops/reload", json={"worker_id": "analyst"}, headers=cluster.auth
            )
            assert reloaded.status_code == 200, reloaded.text


def duty_runs(cluster: Cluster, duty_id: str) -> list[dict[str, Any]]:
    folder = cluster.workspace / "tenants/demo/workers/analyst/runs"
    records = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")]
    return [r for r in records if r["provenance"].get("duty_id") == duty_id]


def requests_with(cluster: Cluster, text: str) -> int:
    return sum(text in json.dumps(r.get("messages", []), ensure_ascii=False) for r in list(cluster.model.requests))


def test_each_slot_of_a_scheduled_duty_runs_once_across_the_processes(cluster: Cluster) -> None:
    """A duty on three slots a second apart (a per-minute duty would take three minutes; the
    scheduler's cron arithmetic is the same) makes three runs, one per slot."""
    at = slots(3, gap_s=1, lead_s=3)
    cluster.model.expect(*(When("[cluster tick]", Reply("tick")) for _ in at))
    add_duty(cluster, "cluster-tick", at, "Say [cluster tick].")
    until(lambda: datetime.now(UTC) > at[-1] and [r["state"] for r in duty_runs(cluster, "cluster-tick")]
          == ["completed"] * len(at), "the three slots' runs", cluster.check_alive)  # fmt: skip
    fired = sorted(datetime.fromisoformat(r["provenance"]["scheduled_for"]) for r in duty_runs(cluster, "cluster-tick"))
    assert fired == at
    assert requests_with(cluster, "[cluster tick]") == len(at)
    cluster.model.assert_done()


def autonomy_here(process: Process) -> dict[str, Any]:
    scope: dict[str, Any] = httpx.get(process.url + "/api/v1/debug/runtime").json()["autonomy_scope"]
    return scope


def sensors_here(process: Process) -> set[str]:
    """The workers whose sensors this process polls."""
    return set(httpx.get(process.url + "/api/v1/debug/runtime").json()["sensors"])


def test_a_killed_process_leaves_its_worker_and_its_im_messages_to_the_others(cluster: Cluster) -> None:
    """kill -9 the process running analyst's autonomy while a duty run of its waits on the model and
    an IM answer it owes waits for Slack (down): another process takes analyst over (within one
    lease ttl of the kill, and a beat) and fires the duty's next slot; the cut run ends
    `interrupted` and is not run again; the IM answer is sent, once, by a live process. Analyst's
    sensor is polled by its owner only, and moves with it."""
    owner = next(p for p in cluster.processes if "demo/analyst" in autonomy_here(p)["workers_here"])
    dead = autonomy_here(owner)["instance"]
    assert [p.index for p in cluster.processes if "demo/analyst" in sensors_here(p)] == [owner.index]
    cluster.slack.down[POST] = 503
    cluster.model.expect(When("question 900", Reply("answer 900")))
    body, headers = slack_dm(900, 0)
    accepted = cluster.client(owner.url).post(WEBHOOK, content=body, headers=headers)
    assert accepted.status_code == 200, accepted.text
    owed = until(lambda: undelivered(cluster, "D900"), "the answer to wait for Slack", cluster.check_alive)
    assert owed["owner"] == dead
    at = slots(2, gap_s=1, lead_s=3)
    cluster.model.expect(When("[kill tick]", Hang()), When("[kill tick]", Reply("tock")))
    add_duty(cluster, "kill-tick", at, "Say [kill tick].")
    until(lambda: requests_with(cluster, "[kill tick]") == 1, "the first slot's run to call the model",
          cluster.check_alive)  # fmt: skip
    # killed between two of its tries, as this test is about: one killed mid-send is in doubt and set aside
    # for a person (at most once; tests/integration/test_channel_answer_in_flight.py)
    until(lambda: between_tries(cluster, "D900"), "the owed answer to be between two tries", cluster.check_alive)
    owner.popen.kill()
    owner.popen.wait(DEADLINE_S)
    sent_before = len(cluster.slack.calls(POST))
    del cluster.slack.down[POST]
    survivors = [p for p in cluster.processes if p is not owner]
    heir = until(lambda: next((p for p in survivors if "demo/analyst" in autonomy_here(p)["workers_here"]), None),
                 "a survivor to take analyst over")  # fmt: skip
    successor = autonomy_here(heir)["instance"]
    until(lambda: "demo/analyst" in sensors_here(heir), "analyst's sensor to move with it")
    assert [p.index for p in survivors if "demo/analyst" in sensors_here(p)] == [heir.index]

    def settled() -> list[tuple[str, str]] | None:
        runs = sorted(duty_runs(cluster, "kill-tick"), key=lambda r: r["provenance"]["scheduled_for"])
        found = [(r["state"], r["owner"]) for r in runs]
        return found if [state for state, _ in found] == ["interrupted", "completed"] else None

    assert until(settled, "the cut run interrupted and the next slot run") == [
        ("interrupted", dead),
        ("completed", successor),
    ]
    assert requests_with(cluster, "[kill tick]") == 2  # the cut run was not replayed
    until(lambda: not journal(cluster.workspace), "the IM answer to be taken over and sent")
    sent = cluster.slack.calls(POST)[sent_before:]
    assert [(r.body["channel"], r.body["text"]) for r in sent] == [("D900", "answer 900")]
    assert requests_with(cluster, "question 900") == 1  # answered before the kill: sent, not run again
    cluster.model.assert_done()


def between_tries(cluster: Cluster, chat_id: str) -> bool:
    """The owed answer in `chat_id` is not being sent and its next try is at least half a second away."""
    entry = undelivered(cluster, chat_id)
    return entry is not None and entry.get("sending") is None and entry["delivery"]["next_at"] > time.time() + 0.5


def undelivered(cluster: Cluster, chat_id: str) -> dict[str, Any] | None:
    """The journal entry of a message in `chat_id` once its answer is recorded and a delivery failed."""
    for path in journal(cluster.workspace):
        with contextlib.suppress(FileNotFoundError, ValueError):  # replaced or removed meanwhile
            entry: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if entry["message"]["chat_id"] == chat_id and entry["answer"] and entry["delivery"]:
                return entry
    return None


def test_a_stream_still_open_when_the_grace_ends_gets_an_error_event_and_its_run_is_interrupted(
    cluster: Cluster,
) -> None:
    """Last of the cluster tests: it leaves a process stopped."""
    index = next(i for i, p in enumerate(cluster.processes) if p.popen.poll() is None)
    cluster.processes[index].popen.send_signal(signal.SIGTERM)
    assert cluster.processes[index].popen.wait(DEADLINE_S) == 0
    process = cluster.restart(index, GENWORKER_SHUTDOWN_GRACE_S="1")
    cluster.model.expect(When("[never answered]", Hang()))
    before = run_states(cluster)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(events_of, cluster.client(process.url), cluster, "[never answered]")
        until(lambda: model_saw(cluster, "[never answered]"), "the turn to reach the model", process.check_alive)
        process.popen.send_signal(signal.SIGTERM)
        events = held.result()
    assert process.popen.wait(DEADLINE_S) == 0
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "shutting_down", events[-1]
    assert sorted(run_states(cluster)) == sorted([*before, "interrupted"])


def events_of(client: httpx.Client, cluster: Cluster, text: str) -> list[dict[str, Any]]:
    body = {"worker_id": "analyst", "message": text}
    with client.stream("POST", "/api/v1/chat/stream", json=body, headers=cluster.auth) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
