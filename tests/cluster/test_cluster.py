"""Three `genworker run` processes behind nginx on one workspace and one Redis (issue #30): an IM
webhook delivered to every process is answered once, and a conversation continues on whichever
process the next message reaches."""

from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx

from genworker.testing import Reply, When

from .conftest import POST, ROOT, WEBHOOK, Cluster, journal, nginx_binary, slack_dm, until

MESSAGES = 100


def slack_runs(workspace: Path) -> list[dict[str, Any]]:
    records = [
        json.loads(p.read_text(encoding="utf-8"))
        for p in (workspace / "tenants/demo/workers/analyst/runs").glob("*.json")
    ]
    return [r for r in records if str(r["provenance"]["source_id"]).startswith("slack:")]


def test_a_webhook_delivered_to_every_process_is_answered_once(cluster: Cluster) -> None:
    cluster.model.expect(*(When(f"question {i:03d}", Reply(f"answer {i:03d}")) for i in range(MESSAGES)))
    already = len(cluster.model.requests)
    direct = [cluster.client(p.url) for p in cluster.processes]

    def deliver(job: tuple[int, int]) -> int:
        i, attempt = job
        process = (i + attempt) % len(direct)  # each of the three deliveries reaches another process
        return (
            direct[process].post(WEBHOOK, content=slack_dm(i, attempt)[0], headers=slack_dm(i, attempt)[1]).status_code
        )

    jobs = [(i, attempt) for i in range(MESSAGES) for attempt in range(3)]
    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(deliver, jobs))
    assert statuses == [200] * len(jobs)
    # every delivery was acked after its message was journaled: once the journal is empty, each
    # accepted message has been answered and its answer delivered
    until(lambda: not journal(cluster.workspace), "the journal to empty", cluster.check_alive)
    replies = cluster.slack.calls(POST)
    assert sorted((r.body["channel"], r.body["text"]) for r in replies) == [
        (f"D{i:03d}", f"answer {i:03d}") for i in range(MESSAGES)
    ]
    assert len(cluster.model.requests) - already == MESSAGES
    cluster.model.assert_done()
    runs = slack_runs(cluster.workspace)
    assert len(runs) == len({r["provenance"]["idempotency_key"] for r in runs}) == MESSAGES
    assert len({r["owner"] for r in runs}) > 1  # the work was shared out: each process answered some


def chat(client: httpx.Client, cluster: Cluster, message: str, thread_id: str | None = None) -> list[dict[str, Any]]:
    body = {"worker_id": "analyst", "message": message} | ({"thread_id": thread_id} if thread_id else {})
    with client.stream("POST", "/api/v1/chat/stream", json=body, headers=cluster.auth) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def sees(*texts: str) -> Any:
    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        missing = [t for t in texts if t not in sent]
        assert not missing, f"the model was not shown {missing}"

    return check


def answer(events: list[dict[str, Any]]) -> str:
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def test_a_conversation_continues_on_another_process_and_through_nginx(cluster: Cluster) -> None:
    first, second, _ = (cluster.client(p.url) for p in cluster.processes)
    balancer = cluster.client(cluster.nginx_url)
    cluster.model.expect(
        Reply("Noted: the code word is PELICAN."),
        Reply("You told me PELICAN.", check=sees("The code word is PELICAN", "Noted: the code word is PELICAN.")),
        Reply("Twice now.", check=sees("The code word is PELICAN", "What was the code word?", "You told me PELICAN.")),
    )
    started = chat(first, cluster, "The code word is PELICAN.")
    thread = started[0]["threadId"]
    assert answer(started) == "Noted: the code word is PELICAN."
    assert answer(chat(second, cluster, "What was the code word?", thread)) == "You told me PELICAN."
    assert answer(chat(balancer, cluster, "Say it once more.", thread)) == "Twice now."
    cluster.model.assert_done()


def test_behind_nginx_a_process_goes_by_the_forwarded_client_address(cluster: Cluster) -> None:
    """Behind a proxy on the same host every request comes from loopback, which the operator routes
    let in without a token: a process takes the client's address from the X-Forwarded-For of a
    proxy it trusts (uvicorn's FORWARDED_ALLOW_IPS, 127.0.0.1 by default)."""
    balancer = cluster.client(cluster.nginx_url)
    assert balancer.get("/api/v1/debug/runtime").status_code == 200  # this test is on loopback
    remote = balancer.get("/api/v1/debug/runtime", headers={"X-Forwarded-For": "203.0.113.9"})
    assert remote.status_code == 403, remote.text
    runtime = cluster.client(cluster.processes[0].url).get("/api/v1/debug/runtime").json()
    assert runtime["profile"] == "shared"


def test_a_dashboard_login_through_nginx_holds_on_every_process(cluster: Cluster) -> None:
    """The login's Origin check compares Origin with Host, so nginx must pass Host on as the
    browser sent it (port included); the session's secret is in the workspace, so any process
    honours the cookie another process issued."""
    balancer = cluster.client(cluster.nginx_url)
    login = balancer.post("/dashboard/login", json={"api_key": cluster.api_key}, headers={"Origin": cluster.nginx_url})
    assert login.status_code == 200, login.text
    cookies = dict(login.cookies)
    for process in cluster.processes:
        session = httpx.get(process.url + "/dashboard/session", cookies=cookies)
        assert session.status_code == 200 and session.json()["tenant_id"] == "demo", session.text


def test_the_shipped_nginx_conf_is_valid(tmp_path: Path) -> None:
    """deploy/nginx.conf as a whole (the cluster runs its `location /` block), with the compose
    service names pointed at loopback, since they resolve only inside the compose network."""
    conf = (ROOT / "deploy/nginx.conf").read_text(encoding="utf-8")
    local = re.sub(r"genworker-(\d):8000", r"127.0.0.1:800\1", conf).replace("listen 80;", "listen 127.0.0.1:8080;")
    (tmp_path / "nginx.conf").write_text(local, encoding="utf-8")
    checked = subprocess.run(
        [nginx_binary(), "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", str(tmp_path / "e.log")],
        capture_output=True, text=True, encoding="utf-8", check=False,
    )  # fmt: skip
    assert checked.returncode == 0 and "syntax is ok" in checked.stderr, checked.stderr
