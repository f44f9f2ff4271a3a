"""IM commands (`/help`, `/approve_confirmation <id>`, ...), answered before the worker sees the message.

Only known commands are intercepted: any other text, including an unknown `/word`, goes to
the worker. Deciding (approve / reject, undo, cancel or resume a wait) and listing pending items
is reserved to the worker's approvers (see `approvers`); `/help`, `/status` and `/feedback` are open to
anyone who may talk to the worker. The decisions themselves live behind `CommandBackend`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from genworker.channels.base import ChannelMessage
from genworker.workspace.snapshot import Worker

__all__ = ["COMMANDS", "CommandBackend", "CommandReply", "ParsedCommand", "approvers", "handle_command", "parse"]

log = logging.getLogger("genworker.channels.commands")

Decision = Literal["approve", "reject"]

COMMANDS: dict[str, str] = {
    "help": "list these commands",
    "confirmations": "list tasks waiting for your confirmation",
    "approve_confirmation": "<id> approve a waiting task",
    "reject_confirmation": "<id> reject a waiting task",
    "suggestions": "list pending suggestions",
    "approve_suggestion": "<id> accept a suggestion",
    "reject_suggestion": "<id> decline a suggestion",
    "feedback": "<text> tell the worker how it is doing",
    "deferred": "list actions waiting in their undo window",
    "undo": "<id> undo a deferred action before it executes",
    "waits": "list plans waiting for an event",
    "cancel_wait": "<id> give up a waiting plan",
    "resume_wait": "<id> resume a waiting plan now, without its event",
    "conflicts": "list conflicts between plans waiting for a person",
    "resolve_conflict": "<id> proceed|drop let the later plan go ahead, or drop it",
    "policy": "what the worker learned from feedback: the policy version deciding, versions in shadow",
    "rollback_policy": "roll back the newest learned policy version",
    "unfreeze_learning": "let the worker learn from feedback again after a spike of negative feedback froze it",
    "status": "what the worker is doing",
}
_PRIVILEGED = frozenset(
    {
        "confirmations",
        "approve_confirmation",
        "reject_confirmation",
        "suggestions",
        "approve_suggestion",
        "reject_suggestion",
        "deferred",
        "undo",
        "waits",
        "cancel_wait",
        "resume_wait",
        "conflicts",
        "resolve_conflict",
        "policy",
        "rollback_policy",
        "unfreeze_learning",
    }
)
_NEEDS_ARG = frozenset(
    {
        "approve_confirmation",
        "reject_confirmation",
        "approve_suggestion",
        "reject_suggestion",
        "feedback",
        "undo",
        "cancel_wait",
        "resume_wait",
        "resolve_conflict",
    }
)
_LIST_LIMIT = 10
_PAST = {"approve": "approved", "reject": "rejected"}


class CommandBackend(Protocol):
    def confirmations(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]: ...

    async def decide_confirmation(
        self, tenant_id: str, worker_id: str, confirmation_id: str, decision: Decision, by: str
    ) -> dict[str, Any]: ...

    def suggestions(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]: ...

    def decide_suggestion(
        self, tenant_id: str, worker_id: str, suggestion_id: str, decision: Decision, by: str
    ) -> dict[str, Any]: ...

    def feedback(self, tenant_id: str, worker_id: str, text: str, by: str) -> None: ...

    def status(self, tenant_id: str, worker_id: str) -> dict[str, Any]: ...

    async def deferred(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]: ...

    async def undo(self, tenant_id: str, worker_id: str, undo_id: str, by: str) -> dict[str, Any]: ...

    async def waits(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]: ...

    async def cancel_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]: ...

    async def resume_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]: ...

    async def conflicts(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]: ...

    async def resolve_conflict(
        self, tenant_id: str, worker_id: str, conflict_id: str, decision: str, by: str
    ) -> dict[str, Any]: ...

    async def policy(self, tenant_id: str, worker_id: str) -> dict[str, Any]: ...

    async def rollback_policy(self, tenant_id: str, worker_id: str, by: str) -> dict[str, Any]: ...

    async def unfreeze_learning(self, tenant_id: str, worker_id: str, by: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    name: str
    argument: str


@dataclass(frozen=True, slots=True)
class CommandReply:
    command: str
    text: str
    allowed: bool = True


def parse(text: str) -> ParsedCommand | None:
    """`/name [argument]` for a known command name (case-insensitive; Slack-style `/name@bot` too)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    if name not in COMMANDS:
        return None
    return ParsedCommand(name, rest.strip())


def approvers(worker: Worker, platform: str, features: dict[str, Any] | None = None) -> frozenset[str]:
    """Sender ids allowed to decide: the channel's `features.approvers` (platform user ids) and the
    handles on `platform` of contacts tagged `owner` or `approver` in PERSONA.md / contacts/."""
    listed = (features or {}).get("approvers") or ()
    ids = {str(v) for v in (listed if isinstance(listed, list | tuple) else (listed,))}
    for contact in worker.contacts.values():
        if {"owner", "approver"} & {t.lower() for t in contact.tags}:
            ids.update(i.handle for i in contact.identities if i.channel == platform)
    return frozenset(ids)


async def handle_command(
    command: ParsedCommand,
    message: ChannelMessage,
    allowed: Iterable[str],
    backend: CommandBackend | None,
) -> CommandReply:
    if command.name == "help":
        return CommandReply("help", _help())
    if command.name in _PRIVILEGED and message.sender_id not in set(allowed):
        log.info(
            "[Channels] %s by %s on %s refused: not an approver of %s/%s",
            command.name,
            message.sender_id,
            message.platform,
            message.tenant_id,
            message.worker_id,
        )
        return CommandReply(command.name, "Sorry, only this worker's owner or approvers may do that.", allowed=False)
    if command.name in _NEEDS_ARG and not command.argument:
        return CommandReply(command.name, f"Usage: /{command.name} {COMMANDS[command.name].split(' ', 1)[0]}")
    if backend is None:
        return CommandReply(command.name, "Commands are not available on this worker right now.")
    try:
        return CommandReply(command.name, await _run(command, message, backend))
    except LookupError:
        return CommandReply(
            command.name,
            f"No item with id {command.argument!r}; see /confirmations, /suggestions, /deferred, /waits or /conflicts.",
        )
    except ValueError as exc:
        return CommandReply(command.name, f"Cannot do that: {exc}")


async def _run(command: ParsedCommand, message: ChannelMessage, backend: CommandBackend) -> str:
    t, w, by, arg = message.tenant_id, message.worker_id, f"{message.platform}:{message.sender_id}", command.argument
    match command.name:
        case "confirmations":
            pending = await asyncio.to_thread(backend.confirmations, t, w)
            return _listing("Waiting for confirmation", pending, lambda c: str(c.get("text", "")))
        case "suggestions":
            suggestions = await asyncio.to_thread(backend.suggestions, t, w)
            return _listing("Pending suggestions", suggestions, lambda s: str(s.get("title", "")))
        case "approve_confirmation" | "reject_confirmation":
            decision: Decision = "approve" if command.name.startswith("approve") else "reject"
            await backend.decide_confirmation(t, w, arg, decision, by)
            return f"Confirmation {arg} {_PAST[decision]}."
        case "approve_suggestion" | "reject_suggestion":
            decision = "approve" if command.name.startswith("approve") else "reject"
            await asyncio.to_thread(backend.decide_suggestion, t, w, arg, decision, by)
            return f"Suggestion {arg} {_PAST[decision]}."
        case "feedback":
            await asyncio.to_thread(backend.feedback, t, w, arg, by)
            return "Thanks, feedback recorded."
        case "deferred":
            held = await backend.deferred(t, w)
            return _listing("Deferred actions", held, lambda d: f"{d.get('tool')} at {d.get('execute_at')}")
        case "undo":
            await backend.undo(t, w, arg, by)
            return f"Deferred action {arg} undone: it will not execute."
        case "waits" | "cancel_wait" | "resume_wait":
            return await _wait_command(command, t, w, by, backend)
        case "conflicts" | "resolve_conflict":
            return await _conflict_command(command, t, w, by, backend)
        case "policy" | "rollback_policy" | "unfreeze_learning":
            return await _learning_command(command, t, w, by, backend)
        case "status":
            status = await asyncio.to_thread(backend.status, t, w)
            return "\n".join(f"{k}: {v}" for k, v in status.items()) or "No status."
    raise AssertionError(f"unhandled command {command.name}")  # pragma: no cover - COMMANDS is exhaustive


async def _wait_command(command: ParsedCommand, t: str, w: str, by: str, backend: CommandBackend) -> str:
    arg = command.argument
    if command.name == "cancel_wait":
        await backend.cancel_wait(t, w, arg, by)
        return f"Wait {arg} cancelled."
    if command.name == "resume_wait":
        await backend.resume_wait(t, w, arg, by)
        return f"Wait {arg} resumed: its work continues now."
    plans = await backend.waits(t, w)
    return _listing("Waiting plans", plans, _wait_label)


async def _conflict_command(command: ParsedCommand, t: str, w: str, by: str, backend: CommandBackend) -> str:
    if command.name == "conflicts":
        cases = await backend.conflicts(t, w)
        return _listing("Conflicts waiting for you", cases, lambda c: str(c.get("detail", "")))
    conflict_id, _, choice = command.argument.partition(" ")
    if choice.strip() not in ("proceed", "drop"):
        return f"Usage: /resolve_conflict {COMMANDS['resolve_conflict']}"
    done = await backend.resolve_conflict(t, w, conflict_id, choice.strip(), by)
    return f"Conflict {conflict_id} {'settled: it proceeds' if done.get('decision') == 'proceed' else 'dropped'}."


async def _learning_command(command: ParsedCommand, t: str, w: str, by: str, backend: CommandBackend) -> str:
    if command.name == "rollback_policy":
        done = await backend.rollback_policy(t, w, by)
        return f"Policy version {done['version']} rolled back ({done['changes']}): the worker decides as before it."
    if command.name == "unfreeze_learning":
        await backend.unfreeze_learning(t, w, by)
        return "Learning from feedback is on again."
    policy = await backend.policy(t, w)
    lines = [f"Policy version {policy['policy_version']} decides" + (" (learning frozen)" if policy["frozen"] else "")]
    for version in policy["versions"][-_LIST_LIMIT:]:
        changes = ", ".join(f"{c['action']} -> {c['gate']}" for c in version["changes"])
        lines.append(f"- v{version['version']} {version['status']}: {changes}")
    return "\n".join(lines)


def _listing(title: str, items: list[dict[str, Any]], label: Callable[[dict[str, Any]], str]) -> str:
    if not items:
        return f"{title}: none."
    lines = [f"{title} ({len(items)}):"]
    lines += [f"- {item.get('id')}: {label(item)[:120]}" for item in items[:_LIST_LIMIT]]
    if len(items) > _LIST_LIMIT:
        lines.append(f"... and {len(items) - _LIST_LIMIT} more")
    return "\n".join(lines)


def _wait_label(plan: dict[str, Any]) -> str:
    held = " (held: resume or cancel it)" if plan.get("state") == "gated" else ""
    title = f" - {plan['title']}" if plan.get("title") else ""
    return f"{plan.get('match_key')}, times out at {plan.get('expires_at')}{held}{title}"


def _help() -> str:
    return "Commands:\n" + "\n".join(f"/{name} {doc}" for name, doc in COMMANDS.items())
