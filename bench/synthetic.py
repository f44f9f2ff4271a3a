"""A synthetic workspace for benchmarks: N tenants x M workers of realistic, valid files.

Every worker has a PERSONA.md, three duties, one goal, two skills and one directive rule;
the same seed always writes the same bytes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["WorkerFiles", "Workspace", "generate", "role_line"]

_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_ROLES = [
    ("Customer Support Lead", "Support"),
    ("Accounts Payable Clerk", "Finance"),
    ("Release Coordinator", "Engineering"),
    ("Recruiting Coordinator", "People"),
    ("Sales Operations Analyst", "Sales"),
    ("Procurement Specialist", "Operations"),
    ("Security Triage Analyst", "Security"),
    ("Content Editor", "Marketing"),
]
_FIRST = [
    "Ava",
    "Liam",
    "Mei",
    "Noah",
    "Priya",
    "Omar",
    "Sofia",
    "Jonas",
    "Yuki",
    "Elena",
    "Kofi",
    "Lena",
]
_LAST = [
    "Chen",
    "Novak",
    "Okafor",
    "Silva",
    "Müller",
    "Haddad",
    "Tanaka",
    "Rossi",
    "Kowalski",
    "Dubois",
]
_TRAITS = ["patient", "precise", "curious", "calm", "direct", "thorough", "friendly", "pragmatic"]
_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Asia/Shanghai",
    "UTC",
    "Asia/Tokyo",
    "Europe/London",
]
_WORDS = [
    "customer",
    "request",
    "ticket",
    "invoice",
    "release",
    "review",
    "approval",
    "escalation",
    "summary",
    "backlog",
    "report",
    "deadline",
    "owner",
    "policy",
    "priority",
    "status",
    "update",
    "follow-up",
    "handover",
    "incident",
    "vendor",
    "contract",
    "budget",
    "forecast",
    "pipeline",
    "check",
    "draft",
    "reply",
    "evidence",
    "audit",
    "schedule",
    "metric",
    "threshold",
    "team",
]


def _sentence(rng: random.Random, words: int = 14) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _paragraph(rng: random.Random, sentences: int = 4) -> str:
    return " ".join(_sentence(rng, rng.randint(9, 18)) for _ in range(sentences))


def _markdown(front: dict[str, Any], body: str) -> str:
    yaml_text = yaml.dump(front, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{yaml_text}---\n\n{body.strip()}\n"


def role_line(role: str) -> str:
    """The exact line holding identity.role in a generated PERSONA.md."""
    return f"  role: {role}\n"


@dataclass(slots=True)
class WorkerFiles:
    tenant_id: str
    worker_id: str
    role: str
    markdown: list[Path] = field(default_factory=list)

    @property
    def persona(self) -> Path:
        return self.markdown[0]


@dataclass(slots=True)
class Workspace:
    root: Path
    tenant_files: list[Path] = field(default_factory=list)  # TENANT.json
    workers: list[WorkerFiles] = field(default_factory=list)

    @property
    def markdown(self) -> list[Path]:
        return [p for w in self.workers for p in w.markdown]

    @property
    def total_bytes(self) -> int:
        return sum(p.stat().st_size for p in [*self.tenant_files, *self.markdown])


def generate(root: Path, tenants: int, workers: int, seed: int = 1234) -> Workspace:
    rng = random.Random(seed)
    ws = Workspace(root)
    for t in range(tenants):
        tenant_id = f"tenant-{t:03d}"
        folder = root / "tenants" / tenant_id
        folder.mkdir(parents=True)
        worker_ids = [f"worker-{w:04d}" for w in range(workers)]
        tenant = {
            "tenant_id": tenant_id,
            "name": f"{rng.choice(_LAST)} {rng.choice(['GmbH', 'Inc.', 'Ltd', 'Group'])}",
            "trust_level": rng.randint(1, 3),
            "tool_policy": {"denied_tools": ["shell_exec"]},
            "mcp_remote_allowed": rng.random() < 0.5,
            "default_worker": worker_ids[0],
            "credentials": {"llm": {"api_key": f"sk-bench-{rng.getrandbits(64):016x}"}},
        }
        path = folder / "TENANT.json"
        path.write_text(json.dumps(tenant, indent=2) + "\n", encoding="utf-8")
        ws.tenant_files.append(path)
        for worker_id in worker_ids:
            ws.workers.append(_write_worker(rng, folder / "workers" / worker_id, tenant_id, worker_id))
    return ws


def _write_worker(rng: random.Random, folder: Path, tenant_id: str, worker_id: str) -> WorkerFiles:
    role, department = rng.choice(_ROLES)
    files = WorkerFiles(tenant_id, worker_id, role)
    slug = department.lower()
    auto_skill, flow_skill = f"{slug}-assistant", f"{slug}-weekly-report"
    duties = [f"{slug}-daily-digest", f"{slug}-intake", f"{slug}-backlog-watch"]

    def write(rel: str, text: str) -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        files.markdown.append(path)

    write("PERSONA.md", _persona(rng, worker_id, role, department, auto_skill))
    write(f"duties/{duties[0]}.md", _digest_duty(rng, duties[0], auto_skill))
    write(f"duties/{duties[1]}.md", _intake_duty(rng, duties[1], auto_skill, flow_skill))
    write(f"duties/{duties[2]}.md", _watch_duty(rng, duties[2], flow_skill))
    write(f"goals/{slug}-quarterly.md", _goal(rng, f"{slug}-quarterly", duties))
    write(f"skills/{auto_skill}/SKILL.md", _autonomous_skill(rng, auto_skill, department))
    write(f"skills/{flow_skill}/SKILL.md", _deterministic_skill(rng, flow_skill, department))
    write("rules/directives/confirm-before-sending.md", _directive(rng))
    return files


def _persona(rng: random.Random, worker_id: str, role: str, department: str, default_skill: str) -> str:
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    contacts = []
    for i in range(3):
        person = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        handle = person.lower().replace(" ", ".")
        contacts.append(
            {
                "person_id": f"person-{i}",
                "name": person,
                "role": rng.choice(["Manager", "Engineer", "Finance Partner", "Customer"]),
                "organization": "Example Corp",
                "identities": [
                    {"channel": "email", "handle": f"{handle}@example.com", "display_name": person},
                    {"channel": "feishu", "handle": f"ou_{rng.getrandbits(48):012x}"},
                ],
                "tags": rng.sample(["vip", "internal", "approver", "on-call", "escalation"], 2),
            }
        )
    front = {
        "identity": {
            "name": name,
            "worker_id": worker_id,
            "version": "1.2",
            "role": role,
            "department": department,
            "reports_to": "person-0",
            "background": _sentence(rng, 20),
            "personality": {
                "traits": rng.sample(_TRAITS, 3),
                "communication_style": "concise, friendly, always states next steps",
                "decision_style": "asks for approval above the spending limit",
            },
            "principles": [_sentence(rng, 8) for _ in range(3)],
        },
        "mode": rng.choice(["personal", "team_member", "service"]),
        "tool_policy": {"mode": "blacklist", "denied_tools": ["shell_exec", "file_delete"]},
        "default_skill": default_skill,
        "constraints": ["Never share customer data outside the tenant.", "Work hours 08:00-18:00."],
        "sensor_configs": [
            {
                "source_type": "email",
                "sensor_id": "inbox",
                "poll_interval": "5m",
                "filter": {"folder": "INBOX", "unread_only": True},
                "routing_rules": [
                    {
                        "field": "subject",
                        "pattern": "urgent",
                        "match": "contains",
                        "route": "triage",
                    },
                    {
                        "field": "from",
                        "pattern": r".*@vip\.example\.com$",
                        "match": "regex",
                        "route": "escalate",
                    },
                    {"field": "subject", "pattern": "INV-", "match": "prefix", "route": "invoices"},
                ],
                "fallback_route": "inbox",
            },
            {
                "source_type": "webhook",
                "sensor_id": "tickets",
                "delivery_mode": "push",
                "require_approval": rng.random() < 0.3,
                "routing_rules": [
                    {"field": "priority", "pattern": "P1", "match": "exact", "route": "incident"},
                    {
                        "field": "labels",
                        "pattern": r"^(bug|outage)$",
                        "match": "regex",
                        "route": "triage",
                    },
                ],
                "fallback_route": "backlog",
            },
        ],
        "channels": [
            {
                "type": "feishu",
                "adapter_id": f"feishu-{department.lower()}",
                "connection_mode": "webhook",
                "chat_ids": [f"oc_{rng.getrandbits(64):016x}", f"oc_{rng.getrandbits(64):016x}"],
                "reply_mode": "streaming",
                "features": {"cards": True, "mentions_only": False},
            },
            {"type": "email", "connection_mode": "polling", "chat_ids": ["INBOX"], "reply_mode": "complete"},
        ],
        "contacts": contacts,
        "contact_settings": {"context_limit": 15},
        "heartbeat": {
            "goal_task_actions": ["plan", "report"],
            "goal_isolated_deviation_threshold": 0.25,
        },
    }
    body = "\n\n".join(
        [
            f"# {name}, {role}",
            _paragraph(rng, 5),
            "## How I work",
            _paragraph(rng, 4),
            "## Escalation",
            _paragraph(rng, 3),
        ]
    )
    return _markdown(front, body)


def _digest_duty(rng: random.Random, duty_id: str, skill: str) -> str:
    front = {
        "duty_id": duty_id,
        "title": "Morning digest of open work",
        "triggers": [
            {
                "id": "weekday-morning",
                "type": "schedule",
                "cron": "0 9 * * 1-5",
                "timezone": rng.choice(_ZONES),
            },
            {"id": "on-demand", "type": "manual"},
        ],
        "posture": {"default": "execute", "overrides": {"on-demand": "draft"}},
        "quality_criteria": ["Lists every open item with an owner", "Fits on one screen"],
        "skill_id": skill,
        "execution_log_retention": "14d",
        "contract": {
            "version": "1.0",
            "input_schema": {
                "type": "object",
                "properties": {"since": {"type": "string", "format": "date-time"}},
            },
            "output_schema": {
                "type": "object",
                "required": ["items"],
                "properties": {"items": {"type": "array", "items": {"type": "string"}}},
            },
            "decision_scope": ["summarise", "assign_owner"],
            "sla": {"completion_time": "15m", "retries": 2},
            "escalation": {"condition": "failed", "target": "person-0"},
            "approval": {"required": False},
            "audit": {"evidence": ["items"], "retain": "90d"},
        },
    }
    return _markdown(front, "Collect open items since the last run and post a digest.\n\n" + _paragraph(rng, 3))


def _intake_duty(rng: random.Random, duty_id: str, skill: str, flow: str) -> str:
    front = {
        "duty_id": duty_id,
        "title": "Triage incoming requests",
        "triggers": [
            {
                "id": "new-ticket",
                "type": "event",
                "source": "webhook:tickets",
                "event_type": "ticket.created",
                "filter": {"priority": ["P1", "P2"]},
            },
            {"id": "new-mail", "type": "event", "source": "email:inbox"},
        ],
        "posture": {"default": "execute", "overrides": {"new-mail": "propose"}},
        "skill_hint": skill,
        "preferred_skill_ids": [skill, flow],
        "escalation": {"condition": "no owner after 2h", "target": "person-0"},
    }
    return _markdown(
        front,
        "Classify the request, find an owner and reply with next steps.\n\n" + _paragraph(rng, 2),
    )


def _watch_duty(rng: random.Random, duty_id: str, flow: str) -> str:
    front = {
        "duty_id": duty_id,
        "title": "Watch the backlog size",
        "triggers": [
            {
                "id": "backlog-high",
                "type": "condition",
                "metric": "backlog.open",
                "rule": "> 40",
                "check_interval": "15m",
            },
            {"id": "hourly", "type": "schedule", "interval": "1h", "misfire_policy": "skip"},
        ],
        "skill_id": flow,
        "process_step": {"process_id": "backlog", "step_id": "watch", "step_name": "Watch size"},
    }
    return _markdown(
        front,
        "When the backlog grows past the threshold, alert the owner.\n\n" + _paragraph(rng, 2),
    )


def _goal(rng: random.Random, goal_id: str, duties: list[str]) -> str:
    milestones = []
    previous: list[str] = []
    for m in range(3):
        tasks = []
        for k in range(3):
            task_id = f"m{m}-t{k}"
            task: dict[str, Any] = {"id": task_id, "title": _sentence(rng, 5), "duty_id": duties[k]}
            if previous:
                task["blocked_by"] = [previous[-1]]
            tasks.append(task)
            previous.append(task_id)
        milestones.append(
            {
                "id": f"m{m}",
                "title": _sentence(rng, 4),
                "deadline": f"2025-{3 * m + 3:02d}-28",
                "tasks": tasks,
            }
        )
    front = {
        "goal_id": goal_id,
        "title": "Halve the response time this quarter",
        "priority": rng.choice(["medium", "high"]),
        "deadline": "2025-09-30",
        "external_source": {"system": "okr", "id": f"OKR-{rng.randint(100, 999)}"},
        "primary_duty_id": duties[1],
        "duty_refs": duties[:2],
        "milestones": milestones,
    }
    return _markdown(front, _paragraph(rng, 4))


def _autonomous_skill(rng: random.Random, name: str, department: str) -> str:
    front = {
        "name": name,
        "description": f"Assistant for {department} requests: answers, drafts and follow-ups.",
        "version": "1.0.0",
        "allowed-tools": ["search_docs", "send_message"],
        "metadata": {
            "genworker": {
                "scope": "worker",
                "priority": 10,
                "default_skill": True,
                "keywords": [{"keyword": w, "weight": round(rng.uniform(0.5, 2.0), 2)} for w in rng.sample(_WORDS, 4)],
                "tools": ["search_docs", "send_message", "create_ticket"],
                "strategy": {"mode": "autonomous", "max_turns": 12},
            },
            "author": "bench",
        },
    }
    return _markdown(front, "\n\n".join(["# Assistant", _paragraph(rng, 4), "## Tone", _paragraph(rng, 2)]))


def _deterministic_skill(rng: random.Random, name: str, department: str) -> str:
    front = {
        "name": name,
        "description": f"Builds the weekly {department} report from tickets and metrics.",
        "version": "2.1.0",
        "metadata": {
            "genworker": {
                "scope": "worker",
                "keywords": [{"keyword": "weekly report"}, {"keyword": "metrics", "weight": 1.5}],
                "tools": ["query_metrics", "send_message"],
                "strategy": {
                    "mode": "deterministic",
                    "fallback": {"condition": "a step fails twice", "mode": "autonomous"},
                    "steps": [
                        {
                            "id": "fetch",
                            "kind": "tool",
                            "tool": "query_metrics",
                            "arguments": {"window": "7d"},
                            "output": "metrics",
                        },
                        {
                            "id": "gather",
                            "kind": "llm",
                            "instructions": "gather",
                            "output": "notes",
                        },
                        {"id": "enough-data", "kind": "condition", "condition": "len(metrics) > 0"},
                        {"id": "write", "kind": "llm", "instructions": "write", "output": "report"},
                        {
                            "id": "send",
                            "kind": "tool",
                            "tool": "send_message",
                            "arguments": {"to": "person-0"},
                        },
                    ],
                },
            }
        },
    }
    body = "\n\n".join(
        [
            "# Weekly report",
            _paragraph(rng, 2),
            "## instructions.gather",
            _paragraph(rng, 3),
            "## instructions.write",
            _paragraph(rng, 3),
        ]
    )
    return _markdown(front, body)


def _directive(rng: random.Random) -> str:
    front = {
        "title": "Confirm before sending externally",
        "priority": 50,
        "scope": ["email", "feishu"],
        "source": "tenant policy",
        "created_at": "2025-01-15",
    }
    return _markdown(front, "Ask for confirmation before any message leaves the company. " + _sentence(rng))
