"""How the runtime wires WAITING plans: route a resumed plan through the worker router (governance,
so the Policy Gate, judges it again) and send a parked run's answer to its conversation, put
timeouts into the brief, read the effective policy of a loaded worker, and the timeout scan
interval setting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from genworker.autonomy.briefs import BriefService, Option
from genworker.autonomy.waiting.models import WaitingPlan
from genworker.autonomy.waiting.runs import continuation, continues_run, fail_parked, supersede_parked
from genworker.settings import Settings, SettingsError
from genworker.worker.governance.policy_gate import DEFAULT_POLICY, Policy, resolve_policy

if TYPE_CHECKING:
    from genworker.autonomy.waiting.replies import ChannelReplies
    from genworker.worker.router import RouteRequest, WorkerRouter
    from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["SCAN_SETTING", "registry_policy", "resume_through", "scan_interval", "timeout_to_brief"]

SCAN_SETTING = "GENWORKER_WAITING_SCAN_S"


def scan_interval(settings: Settings) -> float:
    """Seconds between timeout scans (default 60); a bad value is an error naming the setting."""
    raw = settings.get(SCAN_SETTING)
    if raw is None:
        return 60.0
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{SCAN_SETTING}={raw!r}: must be a number of seconds") from None
    if not 1.0 <= value <= 86_400.0:
        raise SettingsError(f"{SCAN_SETTING}={raw!r}: must be between 1 and 86400")
    return value


def registry_policy(registry: WorkspaceRegistry) -> Callable[[str, str], Policy]:
    """The effective policy of a loaded worker (defaults <- TENANT.json <- PERSONA.md)."""

    def policy_of(tenant_id: str, worker_id: str) -> Policy:
        state = registry.tenant(tenant_id)
        worker = registry.worker(tenant_id, worker_id)
        if state is None:
            return DEFAULT_POLICY
        return resolve_policy(state.tenant.policy, worker.persona.policy if worker is not None else None)

    return policy_of


async def resume_through(router: WorkerRouter, plan: WaitingPlan, *, replies: ChannelReplies | None = None) -> None:
    """Route the resumed `plan`. A run that parked itself is continued in its thread (a retry
    finds the continuation under its idempotency key and runs nothing again); the parked run is
    superseded by it, or fails when it cannot start, and its conversation gets the answer."""
    from genworker.autonomy.duties import route_through

    if not continues_run(plan):
        await route_through(router, _api_request(plan))
        return
    try:
        record, _ = await route_through(router, _known_skill(router, continuation(plan)))
    except Exception as exc:
        await fail_parked(router, plan, f"its continuation could not start: {exc}")
        raise
    await supersede_parked(router, plan, record.run_id)
    if replies is not None:
        await replies.deliver(plan, record)


def _known_skill(router: WorkerRouter, request: RouteRequest) -> RouteRequest:
    """Without the parked run's skill when the worker no longer has it: the matcher picks one."""
    worker = router.registry.worker(request.tenant_id, request.worker_id)
    if request.skill_id is None or worker is None or request.skill_id in worker.skills:
        return request
    return replace(request, skill_id=None)


def _api_request(plan: WaitingPlan) -> RouteRequest:
    """A plan parked through the API routes its `resume.text` (or a note naming the key)."""
    from genworker.worker.router import RouteRequest

    text = str(plan.resume.get("text") or f"Resume: {plan.title or plan.match_key} ({plan.match_key} happened)")
    duty_id = plan.resume.get("duty_id")
    return RouteRequest(
        tenant_id=plan.tenant_id,
        worker_id=plan.worker_id,
        text=text,
        source_type="event",
        source_id=f"waiting:{plan.plan_id}",
        conversational=False,
        duty_id=str(duty_id) if duty_id else None,
        idempotency_key=f"waiting:{plan.plan_id}:{plan.version}",
    )


async def timeout_to_brief(
    briefs: BriefService, plan: WaitingPlan, outcome: Literal["remind", "escalate", "close"]
) -> None:
    api = f"POST /api/v1/workers/{plan.worker_id}/waiting/{plan.plan_id}"
    what = plan.title or plan.match_key
    if outcome == "remind":
        item = briefs.item(
            "waiting", f"Still waiting: {what} ({plan.match_key}); reminder {plan.reminders}",
            item_id=f"remind_{plan.plan_id}_{plan.reminders}", ref=plan.plan_id,
            options=(Option(label="Keep waiting"), Option(label="Resume now", command=f"{api}/resume"),
                     Option(label="Cancel", command=f"{api}/cancel")),
        )  # fmt: skip
        await briefs.record(plan.tenant_id, plan.worker_id, item)
        return
    if outcome == "close":
        item = briefs.item("done", f"Closed the wait for {what}: it timed out", ref=plan.plan_id)
        await briefs.record(plan.tenant_id, plan.worker_id, item)
        return
    title = (
        f"{what} needs your confirmation to continue"
        if plan.gated_by != "timeout"
        else f"{what}: no {plan.match_key} after {plan.reminders} reminder(s)"
    )
    item = briefs.item(
        "confirm", title, item_id=f"escalate_{plan.plan_id}_{plan.version}", ref=plan.plan_id, priority="P1",
        options=(Option(label="Resume now", command=f"{api}/resume"), Option(label="Cancel", command=f"{api}/cancel")),
    )  # fmt: skip
    await briefs.notify(plan.tenant_id, plan.worker_id, item)
