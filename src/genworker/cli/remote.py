"""`genworker inbox|confirmations|duties|runs`: a worker's queues and records on a running server.

Each command is one or two API calls (docs/cli.md lists them); `--json` prints the server's
answer as it came, otherwise an aligned table or a short summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any

from genworker.cli.http import CliError, Remote, add_remote_arguments, remote_from_args, worker_path
from genworker.cli.output import print_json, print_table, timestamp

__all__ = ["register"]

Handler = Callable[[argparse.Namespace, Remote, str], int]

FAILED_STATES = frozenset({"failed", "budget_exceeded", "interrupted"})  # a run that ended without doing its work


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inbox = _group(commands, "inbox", "a worker's inbox: list items, requeue a failed or dead one")
    listing = _action(inbox, "list", "items with their state, oldest first", _inbox_list)
    listing.add_argument("--state", help="only this state (pending, processing, consumed, failed, dead)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many items (default 100)")
    _action(inbox, "requeue", "make a failed, dead or abandoned item pending again", _inbox_requeue).add_argument(
        "item_id"
    )

    confirmations = _group(commands, "confirmations", "gated tasks waiting for a person")
    pending = _action(confirmations, "list", "pending confirmations, newest first", _confirmations_list)
    pending.add_argument("--all", action="store_true", help="decided ones too")
    for decision in ("approve", "reject"):
        verb = "approve it (the task runs now)" if decision == "approve" else "reject it (the task is cancelled)"
        action = _action(confirmations, decision, verb, _decide)
        action.add_argument("confirmation_id")
        action.set_defaults(decision=decision)

    duties = _group(commands, "duties", "a worker's duties: upcoming fires, run one now")
    _action(duties, "list", "the worker's duties, their triggers and next fires", _duties_list)
    run = _action(duties, "run", "run a duty now through its manual trigger", _duty_run)
    run.add_argument("duty_id")
    run.add_argument("--trigger", help="trigger id (default: the duty's manual trigger)")
    run.add_argument("--idempotency-key", help="run at most once for this key")

    runs = _group(commands, "runs", "a worker's runs")
    recent = _action(runs, "list", "runs, newest first", _runs_list)
    recent.add_argument("--limit", type=int, default=20, help="at most this many runs (default 20)")
    _action(runs, "show", "one run: state, provenance, tool calls, model usage, deliverables", _run_show).add_argument(
        "run_id"
    )


def _group(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    parser = commands.add_parser(name, help=help_text)
    return parser.add_subparsers(dest=f"{name}_command", required=True)


def _action(
    group: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str, handler: Handler
) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help_text)
    parser.add_argument("worker", help="WORKER or TENANT/WORKER")
    add_remote_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        return handler(args, remote_from_args(args), f"/api/v1/workers/{worker_path(args.worker)}")

    parser.set_defaults(handler=run)
    return parser


# -- inbox ---------------------------------------------------------------------------------


def _inbox_list(args: argparse.Namespace, remote: Remote, base: str) -> int:
    body = remote.get(f"{base}/inbox", state=args.state, limit=args.limit)
    if args.json:
        print_json(body)
        return 0
    rows = [
        {
            "item": i["item_id"],
            "state": i["state"],
            "event": i["event_type"],
            "source": i["source_id"],
            "attempts": i["attempts"],
            "created": timestamp(i["created_at"]),
            "last_error": i.get("last_error"),
        }
        for i in body["items"]
    ]
    print_table(rows, ["item", "state", "event", "source", "attempts", "created", "last_error"], empty="(no items)")
    print(", ".join(f"{state}: {n}" for state, n in body["counts"].items()))
    return 0


def _inbox_requeue(args: argparse.Namespace, remote: Remote, base: str) -> int:
    item = remote.post(f"{base}/inbox/{_segment(args.item_id)}/requeue")["item"]
    if args.json:
        print_json(item)
    else:
        print(f"requeued {item['item_id']}: now {item['state']}")
    return 0


# -- confirmations ---------------------------------------------------------------------------


def _confirmations_list(args: argparse.Namespace, remote: Remote, base: str) -> int:
    body = remote.get(f"{base}/confirmations", status=None if args.all else "pending")
    items = body["confirmations"]
    if not args.all:  # a server without the status filter still answers every confirmation
        items = [c for c in items if c.get("status", "pending") == "pending"]
    if args.json:
        print_json({**body, "confirmations": items})
        return 0
    rows = [
        {
            "id": c["confirmation_id"],
            "status": c.get("status"),
            "created": timestamp(c.get("created_at")),
            "text": c.get("text"),
            "reasons": "; ".join(c.get("reasons") or ()),
        }
        for c in items
    ]
    print_table(rows, ["id", "status", "created", "text", "reasons"], empty="(no pending confirmations)")
    return 0


def _decide(args: argparse.Namespace, remote: Remote, base: str) -> int:
    body = remote.post(f"{base}/confirmations/{_segment(args.confirmation_id)}/{args.decision}")
    if args.json:
        print_json(body)
        return 0
    decided = body["confirmation"]
    print(f"{decided['confirmation_id']}: {decided['status']}")
    run = body.get("run")
    if run:
        print(f"run {run['run_id']}: {run['state']}")
    if body.get("output"):
        print(body["output"])
    return _run_exit(remote, base, run, quiet=False)


# -- duties ------------------------------------------------------------------------------------


def _duties_list(args: argparse.Namespace, remote: Remote, base: str) -> int:
    listed = remote.get(f"{base}/duties")
    if args.json:
        print_json(listed)
        return 0
    rows = []
    for duty in listed["duties"]:
        for trigger in duty["triggers"]:
            rows.append(
                {
                    "duty": duty["duty_id"],
                    "status": duty["status"],
                    "trigger": trigger["id"],
                    "type": trigger["type"],
                    "next": timestamp(trigger.get("next_fire")),
                    "schedule": _schedule(trigger),
                    "title": duty["title"],
                }
            )
    columns = ["duty", "status", "trigger", "type", "next", "schedule", "title"]
    print_table(rows, columns, empty="(no duties)")
    return 0


def _schedule(trigger: Mapping[str, Any]) -> str:
    """`0 22 * * * Asia/Tokyo` (a cron runs in its zone), `every 300 s`, or empty for other triggers."""
    if trigger.get("cron"):
        return f"{trigger['cron']} {trigger.get('timezone') or 'UTC'}"
    return f"every {trigger['interval']:g} s" if "interval" in trigger else ""


def _duty_run(args: argparse.Namespace, remote: Remote, base: str) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    body: dict[str, Any] = {"trigger_id": args.trigger} if args.trigger else {}
    answer = remote.post(f"{base}/duties/{_segment(args.duty_id)}/run", body or None, headers=headers)
    run = answer["run"]
    if args.json:
        print_json(answer)
    else:
        print(f"duty {answer['duty_id']} ({answer['trigger_id']}): run {run['run_id']} {run['state']}")
        if not answer.get("created"):
            print("(an earlier run with this idempotency key; nothing new was started)")
    return _run_exit(remote, base, run, quiet=args.json)


def _run_exit(remote: Remote, base: str, run: Mapping[str, Any] | None, *, quiet: bool) -> int:
    """1 when the run failed, with its error on stderr (`genworker: run failed: code: message`); else 0."""
    if not run or run.get("state") not in FAILED_STATES:
        return 0
    if not quiet:
        try:
            error = remote.get(f"{base}/runs/{_segment(run['run_id'])}").get("error") or {}
        except CliError:  # the run failed either way; its record is only the detail
            error = {}
        detail = f"{error['code']}: {error.get('message')}" if error.get("code") else run["state"]
        print(f"genworker: run failed: {' '.join(detail.split())}", file=sys.stderr)  # one line
    return 1


# -- runs --------------------------------------------------------------------------------------


def _runs_list(args: argparse.Namespace, remote: Remote, base: str) -> int:
    body = remote.get(f"{base}/runs", limit=args.limit)
    if args.json:
        print_json(body)
        return 0
    rows = [
        {**run, "created_at": timestamp(run.get("created_at")), "finished_at": timestamp(run.get("finished_at"))}
        for run in body["runs"]
    ]
    print_table(rows, ["run_id", "state", "created_at", "finished_at", "thread_id"], empty="(no runs)")
    return 0


def _run_show(args: argparse.Namespace, remote: Remote, base: str) -> int:
    run = remote.get(f"{base}/runs/{_segment(args.run_id)}")
    if args.json:
        print_json(run)
        return 0
    provenance = run.get("provenance") or {}
    print(f"run {run['run_id']}  state {run['state']}  task {run['task_id']}")
    print(f"source {provenance.get('source_type', '-')}  thread {run.get('thread_id') or '-'}")
    error = run.get("error")
    if error:
        print(f"error {error.get('code')}: {error.get('message')}")
    calls = run.get("tool_calls") or []
    print(f"tool calls ({len(calls)})")
    print_table(calls, ["name", "outcome", "code", "duration_ms"], empty="  (none)")
    usage = run.get("model_usage") or []
    print(f"model calls ({len(usage)})")
    columns = ["tier", "model", "latency_ms", "prompt_tokens", "completion_tokens", "cost_usd", "error"]
    print_table(usage, columns, empty="  (none)")
    deliverables = run.get("deliverables") or []
    print(f"deliverables ({len(deliverables)})")
    print_table(deliverables, ["kind", "title", "ref", "content"], empty="  (none)")
    return 0


def _segment(value: str) -> str:
    if not value or "/" in value:
        raise CliError(f"{value!r} is not an id", 2)
    return value
