"""`genworker spaces list|show|confirm|refile|unmerge|pin|revert|sweep WORKER ...`: a worker's context spaces
on a running server (docs/context-spaces.md). One API call each; `--json` prints the server's answer
as it came, otherwise a table or a short summary."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from genworker.cli.http import CliError, Remote, add_remote_arguments, remote_from_args, worker_path
from genworker.cli.output import print_json, print_table, timestamp

__all__ = ["register"]

Handler = Callable[[argparse.Namespace, Remote, str], Any]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("spaces", help="a worker's context spaces: list, show, confirm, re-file, pin")
    actions = group.add_subparsers(dest="spaces_command", required=True)
    listing = _action(actions, "list", "spaces, the most recently active first", _list)
    listing.add_argument("--state", choices=["active", "dormant", "parked", "archived"], help="only this state")
    listing.add_argument("--pending", action="store_true", help="only NEW spaces waiting for a person")
    listing.add_argument("--limit", type=int, default=100, help="at most this many spaces (default 100)")
    _action(actions, "show", "one space: state, pins, evidence, task candidates, changes", _show, "space_id")
    _action(actions, "confirm", "confirm a pending NEW space as a space of its own", _confirm, "space_id")
    refile = _action(actions, "refile", "file a space's facts into another space", _refile, "space_id")
    refile.add_argument("target", help="the space to file it into")
    _action(actions, "unmerge", "take a merged or re-filed space back out of its target", _unmerge, "space_id")
    pin = _action(actions, "pin", "pin a space (--off: unpin, --auto: automatic pins again)", _pin, "space_id")
    pin.add_argument("--off", action="store_true", help="unpin it")
    pin.add_argument("--auto", action="store_true", help="hand it back to the automatic pins")
    revert = _action(actions, "revert", "undo a resurrection; the fact gets a space of its own", _revert, "space_id")
    revert.add_argument("event_id", help="the fact that revived it (`spaces show` lists it)")
    _action(actions, "sweep", "move spaces to the state their last activity says, now", _sweep)


def _action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    handler: Handler,
    *ids: str,
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument("worker", help="WORKER or TENANT/WORKER")
    for name_of_id in ids:
        parser.add_argument(name_of_id)
    add_remote_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        for name_of_id in ids:
            value = getattr(args, name_of_id)
            if not value or "/" in value:
                raise CliError(f"{value!r} is not an id", 2)
        body = handler(args, remote_from_args(args), f"/api/v1/workers/{worker_path(args.worker)}/spaces")
        if args.json:
            print_json(body)
        return 0

    parser.set_defaults(handler=run)
    return parser


def _list(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    params: dict[str, Any] = {"limit": args.limit}
    if args.state:
        params["state"] = args.state
    if args.pending:
        params["review"] = "pending"
    body = remote.get(base, **params)
    if not args.json:
        rows = [
            {
                "space": c["space_id"],
                "state": c["state"] + (" (pinned)" if c["is_pinned"] else ""),
                "review": c["review"],
                "facts": c["evidence_count"],
                "sources": ",".join(c["sources"]),
                "tasks": len(c["tasks"]),
                "active": timestamp(c["last_active_at"]),
                "title": c["title"],
            }
            for c in body["spaces"]
        ]
        print_table(rows, ["space", "state", "review", "facts", "sources", "tasks", "active", "title"])
        counts = body.get("counts") or {}
        print(", ".join(f"{k}: {v}" for k, v in counts.items() if v) or "(no spaces)")
    return body


def _show(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.get(f"{base}/{args.space_id}")
    if not args.json:
        s = body["space"]
        pin = f", pinned ({s['pin_reason']})" if s["is_pinned"] else ""
        print(f"{s['space_id']}: {s['title']}\n{s['state']}{pin}, review {s['review']}, score {s['space_score']:.2f}")
        if s["due_at"]:
            print(f"due {timestamp(s['due_at'])}")
        for e in s["evidence"]:
            print(f"  {timestamp(e['at'])} [{e['source']}] {e['summary']}  ({e['event_id']}; {e['route']})")
        for c in s["candidates"]:
            print(f"task {c['task_id']} {c['priority']} {c['intent']} -> {c['run_id'] or 'not submitted'}")
        for ch in s["changes"]:
            print(f"{timestamp(ch['at'])} {ch['kind']}: {ch['detail']}")
    return body


def _confirm(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.post(f"{base}/{args.space_id}/confirm")
    if not args.json:
        print(f"{args.space_id}: confirmed")
    return body


def _refile(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.post(f"{base}/{args.space_id}/refile", {"target": args.target})
    if not args.json:
        print(f"{args.space_id}: re-filed into {args.target}")
    return body


def _unmerge(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.post(f"{base}/{args.space_id}/unmerge")
    if not args.json:
        back, target = body["spaces"]
        print(f"{back['space_id']}: a space of its own again, out of {target['space_id']}")
    return body


def _pin(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    if args.off and args.auto:
        raise CliError("give --off or --auto, not both", 2)
    pinned = None if args.auto else not args.off
    body = remote.post(f"{base}/{args.space_id}/pin", {"pinned": pinned})
    if not args.json:
        s = body["space"]
        print(f"{s['space_id']}: " + (f"pinned ({s['pin_reason']})" if s["is_pinned"] else "not pinned"))
    return body


def _revert(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.post(f"{base}/{args.space_id}/revert", {"event_id": args.event_id})
    if not args.json:
        old, new = body["spaces"]
        print(f"{old['space_id']}: back to {old['state']}; {args.event_id} is now in {new['space_id']}")
    return body


def _sweep(args: argparse.Namespace, remote: Remote, base: str) -> Any:
    body = remote.post(f"{base}/sweep")
    if not args.json:
        print(f"{body['changed']} spaces changed state")
    return body
