"""200 hourly heartbeats (over eight simulated days) through the real runtime: what each summary
turn sends the model stays flat, and the main session, the meta and the ledger stop growing."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.autonomy.heartbeat import (
    HEARTBEAT_NAME,
    ROLLUP_NAME,
    HeartbeatService,
    HistoryLimits,
    Reported,
    Silent,
)
from genworker.autonomy.inbox import new_item
from genworker.conversation import main_session_id
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.worker.context.tokens import count_tokens

HEARTBEATS = 200
LIMITS = HistoryLimits()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2027, 1, 4, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def answer(n: int) -> str:
    if n % 2:
        return '{"attention": false, "message": ""}'
    message = (
        f"Reading {n} from the boiler-room sensor is 9% above the agreed limit for the third hour in a row; "
        "the facilities team has not acknowledged the alert yet, so someone should call them before the "
        "evening shift starts."
    )
    return json.dumps({"attention": True, "message": message})


def test_two_hundred_heartbeats_keep_the_prompt_and_the_state_flat(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace({"acme": ["alice"]})
    (tmp_path / "configs").mkdir()
    env = scripted_env(model_server)
    worker_dir = workspace / "tenants/acme/workers/alice"
    session_file = workspace / "tenants/acme/sessions" / f"{main_session_id('alice')}.json"
    ledger_file = worker_dir / "runtime/attention_ledger.json"
    sizes: dict[int, tuple[int, int, int]] = {}
    clock = Clock()
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        service = HeartbeatService.build(
            workspace,
            runtime.services.router,
            runtime.services.inbox_aggregate,
            runtime.services.heartbeat.settings,
            limits=LIMITS,
            clock=clock,
        )

        async def one(n: int) -> Reported | Silent:
            item = new_item("acme", "alice", "webhook", "boiler", "webhook.fact", {"title": f"reading {n}", "value": n})
            assert await runtime.services.inbox.write(item)
            report = await service.run_once("acme", "alice")
            assert isinstance(report.summary, Reported | Silent), report.summary
            return report.summary

        for n in range(1, HEARTBEATS + 1):
            model_server.expect(Reply(answer(n)))
            client.portal.call(one, n)  # type: ignore[union-attr]
            clock.now += timedelta(hours=1)
            if n in (100, 200):
                sizes[n] = tuple(  # type: ignore[assignment]
                    p.stat().st_size for p in (session_file, worker_dir / "runtime/heartbeat_meta.json", ledger_file)
                )
        session: Any = client.portal.call(runtime.services.router.sessions.get, "acme", main_session_id("alice"))  # type: ignore[union-attr]

    assert len(model_server.requests) == HEARTBEATS  # one summary turn per heartbeat, nothing else
    totals = [count_tokens(body["messages"]) for body in model_server.requests]
    history = [count_tokens(body["messages"][1:-1]) for body in model_server.requests]
    print(f"\nprompt tokens per heartbeat turn: {[totals[i - 1] for i in (1, 10, 25, 50, 75, 100, 150, 200)]}")
    print(f"history tokens: {[history[i - 1] for i in (1, 10, 25, 50, 75, 100, 150, 200)]}; sizes {sizes}")

    # the roll-up fills after (keep_recent + rollup_lines) reports, i.e. by heartbeat 64; then flat.
    # What still varies is the tokenisation of random item ids and of the numbers in the texts.
    settled = totals[70:]
    assert max(settled) - min(settled) <= 0.02 * min(settled), (min(settled), max(settled))
    assert max(history[70:]) - min(history[70:]) <= 16, (min(history[70:]), max(history[70:]))
    bound = LIMITS.keep_recent * (LIMITS.message_tokens + 8) + LIMITS.rollup_lines * (LIMITS.line_tokens + 16) + 64
    assert max(history) <= bound

    names = [m.name for m in session.messages]
    assert names.count(HEARTBEAT_NAME) == LIMITS.keep_recent and names.count(ROLLUP_NAME) == 1
    assert len(session.metadata["heartbeat_rollup"]["lines"]) == LIMITS.rollup_lines
    assert session.metadata["heartbeat_rollup"]["omitted"] == HEARTBEATS // 2 - LIMITS.keep_recent - LIMITS.rollup_lines
    assert "Reading 200 " in session.messages[-1].content  # the newest report is verbatim

    for before, after in zip(sizes[100], sizes[200], strict=True):  # session, meta, ledger
        assert after <= before + 64, sizes
