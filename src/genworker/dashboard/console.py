"""The console's tenant-wide pages: the overview (workers, their health, open confirmations and spend)
and workspace health (every load error and warning, per file with its line).

Each takes the caller's principal; its tenant is the key's, and only workers the key may use show."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from genworker.auth import Principal
from genworker.dashboard.blocks_work import router_of
from genworker.dashboard.run_view import model_calls
from genworker.dashboard.usage import FAILED_STATES, window_runs
from genworker.runtime.composition import Runtime

__all__ = ["OVERVIEW_DAYS", "health", "overview", "visible_workers"]

OVERVIEW_DAYS = 7


def visible_workers(runtime: Runtime, principal: Principal) -> list[str]:
    """Loaded workers of the key's tenant that the key may use, sorted."""
    state = runtime.registry.tenant(principal.tenant_id)
    return sorted(w for w in (state.workers if state else {}) if principal.can_use(w))


def health(runtime: Runtime, principal: Principal) -> dict[str, Any]:
    """Every error and warning of the tenant's files the key may see, grouped per file.

    A worker's files show to keys that may use that worker; the tenant's own files to every key."""
    tenant_id = principal.tenant_id
    described = runtime.registry.describe()["tenants"].get(tenant_id, {})
    state = runtime.registry.tenant(tenant_id)
    issues: list[dict[str, Any]] = []

    def add(found: list[dict[str, Any]], worker_id: str | None, status: str) -> None:
        issues.extend({**i, "worker_id": worker_id, "status": status} for i in found)

    add(described.get("errors", []), None, "tenant_not_loaded")
    add(described.get("issues", []), None, "loaded")
    add(described.get("reload_errors", []), None, "reload_refused")
    workers: list[dict[str, Any]] = []
    for worker_id, entry in described.get("workers", {}).items():
        if not principal.can_use(worker_id):
            continue
        worker = state.workers.get(worker_id) if state else None
        if entry["status"] == "failed":
            add(entry["errors"], worker_id, "not_loaded")
        else:
            add(entry.get("reload_errors", []), worker_id, "reload_refused")
            add([w.as_dict() for w in (worker.warnings if worker else ())], worker_id, "loaded")
        status = (
            "not_loaded" if entry["status"] == "failed" else "reload_refused" if entry.get("reload_errors") else "ok"
        )
        workers.append({"worker_id": worker_id, "status": status})
    files: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for issue in issues:
        files[str(issue["file"])].append(issue)
    listed: list[dict[str, Any]] = [{"file": f, "issues": sorted(files[f], key=_by_line)} for f in sorted(files)]
    return {
        "tenant_id": tenant_id,
        "tenant_status": described.get("status", "missing"),
        "workers": workers,
        "errors": sum(i["severity"] == "error" for i in issues),
        "warnings": sum(i["severity"] != "error" for i in issues),
        "files": listed,
    }


def _by_line(issue: dict[str, Any]) -> tuple[bool, int]:
    line = issue["line"]
    return (line is None, line or 0)


async def overview(runtime: Runtime, principal: Principal, now: datetime) -> dict[str, Any]:
    """The tenant at a glance: each worker the key may use with its health, open confirmations and
    the runs, failures, tokens and cost of the last OVERVIEW_DAYS days."""
    tenant_id = principal.tenant_id
    state = runtime.registry.tenant(tenant_id)
    found = health(runtime, principal)
    status = {w["worker_id"]: w["status"] for w in found["workers"]}
    problems: dict[str | None, int] = defaultdict(int)
    for file in found["files"]:
        for issue in file["issues"]:
            problems[issue["worker_id"]] += 1
    names = visible_workers(runtime, principal)
    router = router_of(runtime)
    since = now - timedelta(days=OVERVIEW_DAYS)
    runs = await window_runs(runtime, tenant_id, names, since)
    pending = await asyncio.gather(
        *(asyncio.to_thread(router.confirmations.list, tenant_id, w, "pending") for w in names)
    )
    rows: list[dict[str, Any]] = []
    for worker_id, waiting in zip(names, pending, strict=True):
        worker = state.workers[worker_id] if state else None
        mine = [r for r in runs if r.worker_id == worker_id]
        calls = [u for r in mine for u in model_calls(r)]
        costs = [u.cost_usd for u in calls if u.cost_usd is not None]
        rows.append(
            {
                "worker_id": worker_id,
                "name": worker.persona.identity.display_name if worker else worker_id,
                "role": worker.persona.identity.role if worker else "",
                "mode": worker.persona.mode.value if worker else "",
                "health": status.get(worker_id, "ok"),
                "issues": problems.get(worker_id, 0),
                "open_confirmations": len(waiting),
                "runs": len(mine),
                "failed": sum(r.state in FAILED_STATES for r in mine),
                "tokens": sum(u.prompt_tokens + u.completion_tokens for u in calls),
                "cost_usd": round(sum(costs), 6) if costs else None,
            }
        )
    failed_to_load = [w["worker_id"] for w in found["workers"] if w["status"] == "not_loaded"]
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    return {
        "tenant_id": tenant_id,
        "generated_at": now.isoformat(),
        "days": OVERVIEW_DAYS,
        "workers": rows,
        "not_loaded": failed_to_load,
        "health": {"errors": found["errors"], "warnings": found["warnings"], "tenant_files": problems.get(None, 0)},
        "totals": {
            "workers": len(rows),
            "open_confirmations": sum(r["open_confirmations"] for r in rows),
            "runs": sum(r["runs"] for r in rows),
            "failed": sum(r["failed"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows),
            "cost_usd": round(sum(costs), 6) if costs else None,
        },
    }
