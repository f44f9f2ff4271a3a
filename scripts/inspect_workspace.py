#!/usr/bin/env python3
"""What a workspace holds, as this server reads it: tenants, workers, duties, goals, skills, channels
and sensors, and how many upstream spellings `genworker check --explain` would map or ignore.

Read-only: it loads the workspace the way the server does and writes nothing.

Usage: scripts/inspect_workspace.py [--workspace PATH] [--json]
Exit status: 0 the workspace loads, 1 it has errors (listed by `genworker check`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from genworker.channels.registry import adapter_id_for
from genworker.workspace.documents import explaining
from genworker.workspace.errors import Issue
from genworker.workspace.models.duty import DutySpec
from genworker.workspace.models.goal import Goal, is_done
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import TenantState, Worker

__all__ = ["inspect", "main", "render"]

_INDEX = re.compile(r"\[\d+\]")
_LINE = re.compile(r"^(mapped|ignored): ")


def _seconds(value: float | None) -> str | None:
    if value is None:
        return None
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value:g}s"


def _duty(duty: DutySpec) -> dict[str, Any]:
    return {
        "duty_id": duty.duty_id,
        "title": duty.title,
        "status": str(duty.status),
        "triggers": [t.type for t in duty.triggers],
        "depth": duty.execution_policy.default,
        "posture": duty.posture.default,
        "skill": duty.skill_id or duty.skill_hint,
    }


def _goal(goal: Goal) -> dict[str, Any]:
    tasks = [t for m in goal.milestones for t in m.tasks]
    return {
        "goal_id": goal.goal_id,
        "title": goal.title,
        "status": str(goal.status),
        "tasks": len(tasks),
        "tasks_done": sum(1 for t in tasks if is_done(t.status)),
    }


def _channels(worker: Worker) -> list[dict[str, Any]]:
    return [
        {
            "type": c.type,
            "key": c.adapter_id or c.type,
            "connection_mode": c.connection_mode,
            "webhook": f"/api/v1/channel/{adapter_id_for(worker.tenant_id, worker.worker_id, c)}/webhook",
        }
        for c in worker.persona.channels
    ]


def _spellings(notes: Iterable[Issue]) -> dict[str, Any]:
    """Counts of the notes `check --explain` prints as mapped / ignored, and the most common ones."""
    kinds: Counter[str] = Counter()
    what: Counter[str] = Counter()
    for note in notes:
        kind = note.message.partition(":")[0]
        if kind not in ("mapped", "ignored"):
            continue
        kinds[kind] += 1
        field = _INDEX.sub("[]", note.field)
        what[f"{kind}: {field}: {_LINE.sub('', note.message)}" if field else note.message] += 1
    return {"mapped": kinds["mapped"], "ignored": kinds["ignored"], "most_common": what.most_common(5)}


def _worker(worker: Worker) -> dict[str, Any]:
    persona = worker.persona
    return {
        "worker_id": worker.worker_id,
        "name": persona.identity.name,
        "mode": str(persona.mode),
        "skills": sorted(worker.skills),
        "default_skills": sorted(n for n, s in worker.skills.items() if s.spec.settings.default_skill),
        "duties": [_duty(d) for d in sorted(worker.duties.values(), key=lambda d: d.duty_id)],
        "goals": [_goal(g) for g in sorted(worker.goals.values(), key=lambda g: g.goal_id)],
        "channels": _channels(worker),
        "sensors": [
            {"source_type": s.source_type, "sensor_id": s.sensor_id or s.source_type, "poll": _seconds(s.poll_interval)}
            for s in persona.sensor_configs
        ],
        "rules": dict(Counter(r.kind for r in worker.rules)),
        "contacts": len(worker.contacts),
        "warnings": len(worker.warnings),
        "upstream_spellings": _spellings(worker.notes),
    }


def _tenant(state: TenantState) -> dict[str, Any]:
    tenant = state.tenant
    return {
        "tenant_id": tenant.tenant_id,
        "name": tenant.name,
        "trust_level": tenant.trust_level,
        "default_worker": tenant.default_worker,
        "skills": sorted(state.skills),
        "workers": [_worker(w) for w in sorted(state.workers.values(), key=lambda w: w.worker_id)],
        "failed_workers": {
            k: [str(i) for i in f.errors if i.severity == "error"] for k, f in sorted(state.failures.items())
        },
        "upstream_spellings": _spellings(state.notes),
    }


def inspect(root: Path) -> dict[str, Any]:
    """The summary of the workspace at `root` (loaded with `--explain`'s notes)."""
    registry = WorkspaceRegistry(root)
    with explaining():
        registry.load_all()
    issues = registry.issues()
    return {
        "workspace": str(registry.root),
        "errors": [str(i) for i in issues if i.severity == "error"],
        "warnings": sum(1 for i in issues if i.severity == "warning"),
        "tenants": [_tenant(t) for t in sorted(registry.tenants(), key=lambda t: t.tenant_id)],
    }


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _render_worker(w: dict[str, Any]) -> list[str]:
    name = f' "{w["name"]}"' if w["name"] else ""
    default = f" (default: {', '.join(w['default_skills'])})" if w["default_skills"] else ""
    lines = [f"  worker {w['worker_id']}{name}: {w['mode']}", f"    skills: {', '.join(w['skills'])}{default}"]
    for d in w["duties"]:
        triggers = ", ".join(f"{t}×{n}" if n > 1 else t for t, n in Counter(d["triggers"]).items()) or "no triggers"
        lines.append(
            f"    duty {d['duty_id']}: {d['status']}; {triggers}; depth {d['depth']}, posture {d['posture']}"
            + (f"; skill {d['skill']}" if d["skill"] else "")
        )
    for g in w["goals"]:
        lines.append(f"    goal {g['goal_id']}: {g['status']}, {g['tasks_done']}/{g['tasks']} tasks done")
    for c in w["channels"]:
        lines.append(f"    channel {c['key']}: {c['type']} {c['connection_mode']}, webhook {c['webhook']}")
    for s in w["sensors"]:
        every = f"polls every {s['poll']}" if s["poll"] else "pushed"
        lines.append(f"    sensor {s['sensor_id']}: {s['source_type']}, {every}")
    rules = ", ".join(f"{n} {k}" for k, n in sorted(w["rules"].items())) or "none"
    lines.append(f"    rules: {rules}; {_count(w['contacts'], 'contact')}; {_count(w['warnings'], 'warning')}")
    lines += _render_spellings(w["upstream_spellings"], "    ")
    return lines


def _render_spellings(spellings: dict[str, Any], indent: str) -> list[str]:
    if not spellings["mapped"] and not spellings["ignored"]:
        return []
    lines = [f"{indent}upstream spellings: {spellings['mapped']} mapped, {spellings['ignored']} ignored"]
    lines += [f"{indent}  {what} (×{n})" for what, n in spellings["most_common"]]
    return lines


def render(summary: dict[str, Any]) -> str:
    lines = [f"workspace {summary['workspace']}"]
    for t in summary["tenants"]:
        default = f", default worker {t['default_worker']}" if t["default_worker"] else ""
        lines.append(f'tenant {t["tenant_id"]} "{t["name"]}": trust level {t["trust_level"]}{default}')
        if t["skills"]:
            lines.append(f"  tenant skills: {', '.join(t['skills'])}")
        lines += _render_spellings(t["upstream_spellings"], "  ")
        for w in t["workers"]:
            lines += _render_worker(w)
        for worker_id, errors in t["failed_workers"].items():
            lines.append(f"  worker {worker_id}: FAILED ({_count(len(errors), 'error')}; first: {errors[0]})")
    status = "loads" if not summary["errors"] else f"has {_count(len(summary['errors']), 'error')}"
    lines.append(
        f"the workspace {status} ({_count(summary['warnings'], 'warning')}); each file's details: "
        f"genworker check --explain --workspace {summary['workspace']}"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--workspace", type=Path, default=Path("workspace"), help="the workspace folder (default: ./workspace)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if not args.workspace.is_dir():
        print(f"inspect: workspace folder {args.workspace} does not exist", file=sys.stderr)
        return 1
    summary = inspect(args.workspace)
    sys.stdout.write(json.dumps(summary, indent=2, ensure_ascii=False) + "\n" if args.json else render(summary))
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
