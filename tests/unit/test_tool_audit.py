"""Audit sinks and redaction: one JSON line per call, nothing secret in it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from genworker.ids import InvalidIdError
from genworker.tools.audit import AUDIT_SCHEMA_VERSION, AuditRecord, JsonlAuditSink, WorkerAuditSink
from genworker.tools.base import ToolResult
from genworker.tools.middlewares import MASK, Redactor
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval

pytestmark = pytest.mark.anyio


def record(n: int = 0, tenant: str = "acme", worker: str = "w") -> AuditRecord:
    return AuditRecord(
        ts="2025-01-01T00:00:00.000+00:00",
        tenant_id=tenant,
        worker_id=worker,
        run_id="run",
        call_id=f"c{n}",
        tool="file_read",
        caller="llm",
        effect="read",
        risk_level="low",
        args={"path": "files/a.txt", "n": n},
        decision="allow",
        outcome="completed",
        code=None,
        detail="",
        duration_ms=1.5,
    )


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_jsonl_sink_appends_one_line_per_record(tmp_path: Path) -> None:
    sink = JsonlAuditSink(tmp_path / "audit/tools.jsonl")
    await asyncio.gather(*(sink.write(record(i)) for i in range(200)))
    rows = lines(sink.path)
    assert sorted(str(r["call_id"]) for r in rows) == sorted(f"c{i}" for i in range(200))
    assert rows[0]["schema_version"] == AUDIT_SCHEMA_VERSION
    assert set(rows[0]) == set(record().as_dict())


def test_jsonl_sink_is_safe_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from genworker.tools.audit import JsonlAuditSink
        sink = JsonlAuditSink(Path(sys.argv[1]))
        for i in range(300):
            sink.append_line('{"writer": %s, "i": %d, "pad": "%s"}\\n' % (sys.argv[2], i, "x" * 3000))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(w)], encoding="utf-8") for w in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    rows = lines(path)
    assert len(rows) == 1200
    assert {(r["writer"], r["i"]) for r in rows} == {(w, i) for w in range(4) for i in range(300)}


async def test_worker_sink_routes_by_tenant_and_worker(tmp_path: Path) -> None:
    sink = WorkerAuditSink(tmp_path)
    await sink.write(record(1, "acme", "alice"))
    await sink.write(record(2, "beta", "bob"))
    await sink.write(record(3, "acme", "alice"))
    alice = tmp_path / "tenants/acme/workers/alice/runtime/tool_audit.jsonl"
    bob = tmp_path / "tenants/beta/workers/bob/runtime/tool_audit.jsonl"
    assert [r["call_id"] for r in lines(alice)] == ["c1", "c3"]
    assert [r["call_id"] for r in lines(bob)] == ["c2"]
    with pytest.raises(InvalidIdError):
        await sink.write(record(4, "..", "x"))


def test_redactor_masks_secrets_and_token_shapes() -> None:
    redactor = Redactor(("correct-horse", "abc"))
    text = (
        "pw correct-horse, abc stays, sk-proj-0123456789abcdefghij, xoxb-123-456-abcdefghij, "
        "ghp_0123456789abcdefghijABCDEFGHIJ0123, AKIAABCDEFGHIJKLMNOP, Authorization: bearer abc.def.ghi-123\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    )
    assert redactor.text(text) == (
        f"pw {MASK}, abc stays, {MASK}, {MASK}, {MASK}, {MASK}, Authorization: bearer {MASK}\n{MASK}"
    )


def test_redactor_values_and_outcomes() -> None:
    redactor = Redactor(("s3cr3t-value",))
    assert redactor.value({"a": ["x s3cr3t-value"], "password": "p", "token": "", "n": 1}) == {
        "a": [f"x {MASK}"],
        "password": MASK,
        "token": "",
        "n": 1,
    }
    assert redactor.outcome(ToolCompleted(ToolResult("s3cr3t-value", data=("s3cr3t-value",)))) == ToolCompleted(
        ToolResult(MASK, data=[MASK])
    )
    assert redactor.outcome(ToolFailed("error", "s3cr3t-value")) == ToolFailed("error", MASK)
    assert redactor.outcome(ToolDenied("hook", "s3cr3t-value")) == ToolDenied("hook", MASK)
    assert redactor.outcome(ToolNeedsApproval("s3cr3t-value")) == ToolNeedsApproval(MASK)
