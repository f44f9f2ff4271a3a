"""A duty's result, delivered where the duty says (`delivery`), exactly once per run.

When a run has passed its contract checks (contract.py) and before it is recorded completed, the
deliveries are planned: each destination resolved to recipients and a message, written to

    tenants/{t}/workers/{w}/runtime/duty_deliveries/{run_id}.json     (schema_version 1)

and recorded on the run as `pending`. Once the run is completed each one goes through the outbox
under `duty:{tenant}:{worker}:{run_id}:{index}` (a folder destination is written directly), its
state is recorded on the run, and the plan file is removed. A process that stops in between
leaves the plan: `recover()` at the next start delivers what a completed run still owes, and the
outbox's keys make a destination already handed over a no-op. The outbox's later attempts
(re-sends, given up, outcome unknown) update the run's record (`on_outbox`).

Only a run whose governance posture lets it act (`normal`, or `gated_execute` once a person approved
it) delivers; a `proposal_only` or `degraded` run's result (a duty posture `propose` or `draft`, a
tenant at trust level 0, a contract that only lets it suggest) is `held`: a draft for a person, who
sees it in the worker's next brief and sends it with `release` (planned and delivered as above,
under the same keys).
Nothing fails silently: a destination that cannot be resolved or sent is `failed` on the run with
the reason, and logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from genworker.autonomy.duties.contract import parse_output
from genworker.bus.models import Event
from genworker.channels.registry import ChannelBinding
from genworker.delivery.outbox import Outbox, OutboxEntry, OutboxMessage, Recipient
from genworker.delivery.recipients import (
    EMAIL_ADDRESS,
    bound_chat,
    can_send,
    contact_recipients,
    default_target,
    email_capable,
    find_contact,
    owner_of,
)
from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.contract_record import DeliveryRecord, DeliveryState
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRecord, RunRef, RunState
from genworker.workspace.models.duty import DutySpec
from genworker.workspace.models.duty_terms import OWNER, DeliveryTarget
from genworker.workspace.snapshot import Worker

__all__ = ["SCHEMA_VERSION", "DutyDelivery", "NothingHeld", "PlannedDelivery", "delivery_key", "render_result"]

log = logging.getLogger("genworker.duties")

SCHEMA_VERSION: Final = 1
Bindings = Callable[[str, str], list[ChannelBinding]]
_ACTING = frozenset({"normal", "gated_execute"})  # governance postures that act (not proposal_only, degraded)
SLACK_SECTION = 3000  # characters of one Block Kit section


def delivery_key(tenant_id: str, worker_id: str, run_id: str, index: int) -> str:
    return f"duty:{tenant_id}:{worker_id}:{run_id}:{index}"


# -- the message ------------------------------------------------------------------------------


def _markdown(value: Any, depth: int = 0) -> str:
    if isinstance(value, Mapping):
        lines = []
        for key, item in value.items():
            if isinstance(item, str) and "\n" in item:
                lines.append(f"**{key}**\n\n{item}")
            elif isinstance(item, Mapping | list):
                lines.append(f"**{key}**:\n{_markdown(item, depth + 1)}")
            else:
                lines.append(f"**{key}**: {item}")
        return "\n\n".join(lines) if depth == 0 else "\n".join(lines)
    if isinstance(value, list):
        indent = "  " * max(0, depth - 1)
        return "\n".join(f"{indent}- {_inline(item)}" for item in value)
    return str(value)


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def render_result(output: str, schema: Mapping[str, Any]) -> str:
    """The result for people: a structured (JSON) result as Markdown, text as it is."""
    if schema:
        value, unreadable = parse_output(output, schema)
        if unreadable is None and isinstance(value, Mapping | list):
            return _markdown(value)
    return output


def _cards(title: str, body: str) -> dict[str, dict[str, Any]]:
    sections = [body[i : i + SLACK_SECTION] for i in range(0, len(body), SLACK_SECTION)] or [body]
    slack = [{"type": "header", "text": {"type": "plain_text", "text": title[:150]}}]
    slack += [{"type": "section", "text": {"type": "mrkdwn", "text": part}} for part in sections]
    feishu = {
        "config": {"wide_screen_mode": True},
        "header": {"title": {"tag": "plain_text", "content": title}},
        "elements": [{"tag": "markdown", "content": body}],
    }
    return {"slack": {"blocks": slack}, "feishu": feishu}


def message_for(target: DeliveryTarget, duty: DutySpec, body: str, when: datetime) -> OutboxMessage:
    subject = target.subject or duty.title
    if target.format == "file":
        name = f"{duty.duty_id}-{when:%Y-%m-%d}.md"
        return OutboxMessage(f"{duty.title}: the result is attached ({name}).", "text", subject,
                             files=((name, body),))  # fmt: skip
    text = f"**{duty.title}**\n\n{body}"
    if target.format == "card":
        return OutboxMessage(text, "card", subject, cards=_cards(duty.title, body))
    return OutboxMessage(text, "markdown", subject)


class NothingHeld(Exception):
    """A release of a run that holds no result of the duty (the message says why)."""


# -- recipients -------------------------------------------------------------------------------


class Unreachable(Exception):
    """A destination names nothing the worker can send to; the message says what exists."""


def _binding_for(bindings: Sequence[ChannelBinding], name: str) -> ChannelBinding | None:
    wanted = name.strip().lower()
    usable = [b for b in bindings if can_send(b)]
    return next((b for b in usable if b.key.lower() == wanted), None) or next(
        (b for b in usable if b.platform == wanted), None
    )


def recipients_for(worker: Worker, bindings: Sequence[ChannelBinding], target: DeliveryTarget) -> list[Recipient]:
    """Who `target` (then its fallback) means on this worker's channels, preferred first; Unreachable
    says why none."""
    found: list[Recipient] = []
    problems: list[str] = []
    for part in (target, target.fallback):
        if part is None:
            continue
        try:
            found += [r for r in _recipients(worker, bindings, part) if r not in found]
        except Unreachable as exc:
            problems.append(str(exc))
    if not found:
        raise Unreachable("; ".join(problems))
    if problems:
        log.warning("[Duties] %s: %s", target.describe(), "; ".join(problems))
    return found


def _recipients(worker: Worker, bindings: Sequence[ChannelBinding], target: DeliveryTarget) -> list[Recipient]:
    if target.email:
        if not email_capable(worker, bindings):
            raise Unreachable("the worker cannot send mail: CHANNEL_CREDENTIALS.json has no email.worker_smtp_host")
        addresses = ", ".join(target.email)
        return [Recipient("email", addresses, label=f"{addresses} (email)")]
    if target.chat is not None:
        found = bound_chat(bindings, target.chat)
        if found is None:
            raise Unreachable(f"chat {target.chat!r} is not bound to a channel of the worker that can send "
                              "(chat_ids or features.group_chat_ids, with credentials)")  # fmt: skip
        return [found]
    if target.channel is not None:
        binding = _binding_for(bindings, target.channel)
        chat = default_target(binding) if binding is not None else None
        if binding is None or chat is None:
            raise Unreachable(f"channel {target.channel!r}: no channel of the worker with credentials and a default "
                              "chat (its first chat_ids entry; email: owner_address)")  # fmt: skip
        label = f"default chat of {binding.key} ({binding.platform})"
        return [Recipient(binding.platform, chat.chat_id, chat.chat_type, binding.key, label=label)]
    assert target.contact is not None
    return _contact(worker, bindings, target)


def _contact(worker: Worker, bindings: Sequence[ChannelBinding], target: DeliveryTarget) -> list[Recipient]:
    name = target.contact or ""
    contact = owner_of(worker) if name.strip().lower() == OWNER else find_contact(worker, name)
    if contact is None and name.strip().lower() == OWNER:
        reports_to = worker.persona.identity.reports_to.strip()
        if EMAIL_ADDRESS.match(reports_to) and email_capable(worker, bindings) and target.platform in (None, "email"):
            return [Recipient("email", reports_to, label=f"{reports_to} (email)")]
        raise Unreachable(f"the owner (identity.reports_to {reports_to!r}) is not one of the worker's contacts")
    if contact is None:
        known = ", ".join(sorted(c.person_id for c in worker.contacts.values())) or "none"
        raise Unreachable(f"no contact {name!r} (contacts: {known})")
    found = contact_recipients(worker, bindings, contact, target.platform)
    if not found:
        on = f" on {target.platform}" if target.platform else ""
        raise Unreachable(f"{contact.display_name} has no identity{on} the worker can send to")
    return found


# -- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedDelivery:
    key: str
    to: str
    format: str
    recipients: tuple[Recipient, ...] = ()
    message: OutboxMessage | None = None
    folder: str | None = None  # relative to the worker folder
    body: str = ""  # a folder's file content
    status: DeliveryState = "pending"
    problem: str | None = None  # why it is not pending

    def record(self, now: datetime) -> DeliveryRecord:
        return DeliveryRecord(self.key, self.to, self.format, self.status, now, error=self.problem)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["recipients"] = [asdict(r) for r in self.recipients]
        if self.message is not None:
            data["message"] = {**asdict(self.message), "cards": dict(self.message.cards)}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlannedDelivery:
        fields = dict(data)
        fields["recipients"] = tuple(Recipient(**r) for r in fields.get("recipients", ()))
        message = fields.get("message")
        if message is not None:
            message = dict(message)
            message["cc"] = tuple(message.get("cc", ()))
            message["files"] = tuple(tuple(f) for f in message.get("files", ()))
            fields["message"] = OutboxMessage(**message)
        return cls(**fields)


@dataclass
class DutyDelivery:
    workspace_root: Path
    tasks: TaskLifecycle
    outbox: Outbox | None = None  # the runtime sets it once the channels' delivery exists
    bindings: Bindings = field(default=lambda tenant_id, worker_id: [])  # the channel registry's
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    # -- planning (the run is evaluating) ----------------------------------------------------------

    def plan(
        self, worker: Worker, duty: DutySpec, run_id: str, output: str, posture: str
    ) -> tuple[PlannedDelivery, ...]:
        """Each destination of `duty`, resolved now; `held` when the posture does not act."""
        schema = duty.contract.output_schema if duty.contract is not None else {}
        body = render_result(output, schema)
        bindings = self.bindings(worker.tenant_id, worker.worker_id)
        now = self.clock()
        planned = []
        for index, target in enumerate(duty.delivery):
            key = delivery_key(worker.tenant_id, worker.worker_id, run_id, index)
            base = PlannedDelivery(key, target.describe(), target.format)
            if posture not in _ACTING:
                why = f"governance posture {posture or 'unknown'}: the run may only propose; its result is not sent"
                planned.append(_with(base, "held", why))
            elif target.folder is not None:
                planned.append(_with(base, "pending", None, folder=target.folder, body=_document(duty, body, now)))
            else:
                try:
                    recipients = tuple(recipients_for(worker, bindings, target))
                except Unreachable as exc:
                    planned.append(_with(base, "failed", str(exc)))
                    continue
                planned.append(_with(base, "pending", None, recipients=recipients,
                                     message=message_for(target, duty, body, now)))  # fmt: skip
        return tuple(planned)

    async def save(self, ref: RunRef, duty_id: str, planned: Sequence[PlannedDelivery]) -> None:
        """The plan on disk (for `recover`) and on the run, before the run is recorded completed."""
        if any(p.status == "pending" for p in planned):
            document = {
                "schema_version": SCHEMA_VERSION,
                "tenant_id": ref.tenant_id,
                "worker_id": ref.worker_id,
                "run_id": ref.run_id,
                "duty_id": duty_id,
                "created_at": self.clock().isoformat(),
                "deliveries": [p.as_json() for p in planned],
            }
            data = json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")
            await asyncio.to_thread(write_atomic, self._plan_path(ref), data)
        now = self.clock()
        for p in planned:
            if p.status == "failed":
                log.error("[Duties] run %s: %s not delivered: %s", ref, p.to, p.problem)
        await self.tasks.record_deliveries(ref, [p.record(now) for p in planned])

    # -- delivering (the run has ended) ------------------------------------------------------------

    async def deliver(self, ref: RunRef) -> RunRecord | None:
        """Send what the run's plan still owes (nothing: None); the run as recorded after."""
        planned = await asyncio.to_thread(self._read_plan, ref)
        if planned is None:
            return None
        run = await self.tasks.get_run(ref)
        if not run.terminal:
            return None  # still settling in a live process
        now = self.clock()
        if run.state is not RunState.COMPLETED:
            skipped = [_with(p, "skipped", f"the run ended {run.state.value}").record(now) for p in planned
                       if p.status == "pending"]  # fmt: skip
            run = await self.tasks.record_deliveries(ref, skipped)
        for pending in [p for p in planned if p.status == "pending" and run.state is RunState.COMPLETED]:
            record = await self._send(ref, run, pending)
            run = await self.tasks.record_deliveries(ref, [record])  # each on the run as soon as it is known
            level = logging.INFO if record.state == "sent" else logging.WARNING
            log.log(level, "[Duties] run %s: %s %s%s", ref, record.to, record.state,
                    f" ({record.error})" if record.error else "")  # fmt: skip
        await asyncio.to_thread(self._plan_path(ref).unlink, missing_ok=True)
        return run

    async def _send(self, ref: RunRef, run: RunRecord, planned: PlannedDelivery) -> DeliveryRecord:
        if planned.folder is not None:
            return await self._write_folder(ref, run, planned)
        if self.outbox is None or planned.message is None:
            return _with(planned, "failed", "no outbox: the runtime's channels are not running").record(self.clock())
        origin = {"kind": "duty", "run_id": ref.run_id, "duty_id": run.provenance.duty_id or "", "to": planned.to}
        entry = await self.outbox.send(
            planned.key, ref.tenant_id, ref.worker_id, planned.recipients, planned.message, origin=origin
        )
        return record_of(planned, entry, self.clock())

    async def _write_folder(self, ref: RunRef, run: RunRecord, planned: PlannedDelivery) -> DeliveryRecord:
        assert planned.folder is not None
        day = (run.provenance.scheduled_for or run.timings.queued_at).astimezone(UTC)
        duty = validate_id(run.provenance.duty_id or "duty", "duty id")
        relative = f"{planned.folder.rstrip('/')}/{duty}/{day:%Y-%m-%d}-{ref.run_id}.md"
        path = self._worker_dir(ref) / relative
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(write_atomic, path, planned.body.encode("utf-8"), mode=0o644)
        except OSError as exc:
            return _with(planned, "failed", f"{relative}: {exc}").record(self.clock())
        return DeliveryRecord(planned.key, planned.to, planned.format, "sent", self.clock(), delivered_to=relative)

    # -- a held result, released by a person -------------------------------------------------------

    async def release(self, worker: Worker, duty: DutySpec, ref: RunRef) -> RunRecord:
        """Send the result a completed run of `duty` held to the destinations it held it from (as the
        duty names them now); the run as recorded after. NothingHeld when there is none."""
        run = await self.tasks.get_run(ref)
        held = {d.key for d in run.deliveries if d.state == "held"}
        if run.provenance.duty_id != duty.duty_id:
            raise NothingHeld(f"run {ref.run_id} is not a run of duty {duty.duty_id!r}")
        if run.state is not RunState.COMPLETED or not held:
            raise NothingHeld(f"run {ref.run_id} ({run.state.value}) holds no result to send")
        output = next((d.content for d in run.deliverables if d.kind == "text"), "")
        planned = [p for p in self.plan(worker, duty, ref.run_id, output, "normal") if p.key in held]
        log.warning("[Duties] run %s: its held result is released to %s", ref, ", ".join(p.to for p in planned))
        await self.save(ref, duty.duty_id, planned)
        return await self.deliver(ref) or await self.tasks.get_run(ref)

    # -- restarts and the outbox's later attempts --------------------------------------------------

    async def recover(self) -> int:
        """At start-up (after interrupted runs were marked): deliver what completed runs still owe."""
        delivered = 0
        for path in await asyncio.to_thread(self._plan_paths):
            parts = path.relative_to(self.workspace_root).parts  # tenants/{t}/workers/{w}/runtime/...
            try:
                ref = RunRef(parts[1], parts[3], path.stem)
                if await self.deliver(ref) is not None:
                    delivered += 1
            except Exception:  # one unreadable plan must not stop the others
                log.exception("[Duties] delivery plan %s could not be recovered", path)
        if delivered:
            log.warning("[Duties] delivered the results of %d runs a stopped process had not sent", delivered)
        return delivered

    async def on_outbox(self, event: Event) -> None:
        """An outbox attempt settled: a duty delivery's state follows it on its run."""
        payload = event.payload
        key, run_id = str(payload.get("key") or ""), payload.get("run_id")
        if not key.startswith("duty:") or not isinstance(run_id, str) or not event.tenant_id or not event.worker_id:
            return
        ref = RunRef(event.tenant_id, event.worker_id, run_id)
        run = await self.tasks.get_run(ref)
        known = next((d for d in run.deliveries if d.key == key), None)
        state = str(payload.get("state"))
        if known is None or known.state == state or state not in _OUTBOX_STATES:
            return
        error = payload.get("last_error") if state != "sent" else None
        updated = DeliveryRecord(known.key, known.to, known.format, state, self.clock(),  # type: ignore[arg-type]
                                 payload.get("outbox_id"), payload.get("delivered_to"), error)  # fmt: skip
        await self.tasks.record_deliveries(ref, [updated])
        level = logging.INFO if state == "sent" else logging.WARNING
        log.log(level, "[Duties] run %s: %s now %s", ref, known.to, state)

    # -- files -------------------------------------------------------------------------------------

    def _worker_dir(self, ref: RunRef) -> Path:
        return safe_join(self.workspace_root, "tenants", ref.tenant_id, "workers", ref.worker_id)

    def _plan_path(self, ref: RunRef) -> Path:
        return self._worker_dir(ref) / "runtime" / "duty_deliveries" / f"{validate_id(ref.run_id, 'run id')}.json"

    def _plan_paths(self) -> list[Path]:
        return sorted(self.workspace_root.glob("tenants/*/workers/*/runtime/duty_deliveries/*.json"))

    def _read_plan(self, ref: RunRef) -> tuple[PlannedDelivery, ...] | None:
        path = self._plan_path(ref)
        try:
            document = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        if not isinstance(document, Mapping) or document.get("schema_version") != SCHEMA_VERSION:
            version = document.get("schema_version") if isinstance(document, Mapping) else None
            raise ValueError(f"{path}: schema_version {version!r} is unknown; this build reads {SCHEMA_VERSION}")
        return tuple(PlannedDelivery.from_json(d) for d in document["deliveries"])


_OUTBOX_STATES = frozenset({"sent", "retrying", "given_up", "failed", "outcome_unknown"})


def _with(planned: PlannedDelivery, status: DeliveryState, problem: str | None, **changes: Any) -> PlannedDelivery:
    return replace(planned, status=status, problem=problem, **changes)


def record_of(planned: PlannedDelivery, entry: OutboxEntry, now: datetime) -> DeliveryRecord:
    error = entry.last_error if entry.state != "sent" else None
    return DeliveryRecord(planned.key, planned.to, planned.format, entry.state, now, entry.entry_id,
                          entry.delivered_to, error)  # fmt: skip


def _document(duty: DutySpec, body: str, when: datetime) -> str:
    return f"# {duty.title}\n\n_{when:%Y-%m-%d %H:%M} UTC_\n\n{body.rstrip()}\n"
