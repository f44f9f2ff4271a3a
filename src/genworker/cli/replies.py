"""`genworker replies list|resend WORKER`: IM answers a running server still owes (docs/channels.md).

`list` shows undelivered answers (being re-sent, or given up on) and messages waiting for a human;
`resend ID` sends one again now. One API call each; `--json` prints the server's answer as it came.
"""

from __future__ import annotations

import argparse

from genworker.cli.http import CliError, add_remote_arguments, remote_from_args, worker_path
from genworker.cli.output import print_json, print_table, timestamp

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("replies", help="IM answers not delivered yet; re-send one")
    actions = group.add_subparsers(dest="replies_command", required=True)
    listing = actions.add_parser("list", help="undelivered answers and messages that need a human")
    listing.add_argument("worker", help="WORKER or TENANT/WORKER")
    listing.set_defaults(handler=_list)
    resend = actions.add_parser("resend", help="send an undelivered answer again now")
    resend.add_argument("worker", help="WORKER or TENANT/WORKER")
    resend.add_argument("reply_id", help="the id `replies list` shows")
    resend.set_defaults(handler=_resend)
    for parser in (listing, resend):
        add_remote_arguments(parser)


def _base(args: argparse.Namespace) -> str:
    return f"/api/v1/workers/{worker_path(args.worker)}/channel-replies"


def _list(args: argparse.Namespace) -> int:
    body = remote_from_args(args).get(_base(args))
    if args.json:
        print_json(body)
        return 0
    rows = [
        {
            "id": r["id"],
            "state": r["state"],
            "platform": r["platform"],
            "to": r["sender_id"],
            "attempts": r["delivery_attempts"],
            "next": timestamp(r["next_attempt_at"]) if r["next_attempt_at"] else "",
            "last_error": r["last_error"],
        }
        for r in body["undelivered"]
    ]
    print_table(rows, ["id", "state", "platform", "to", "attempts", "next", "last_error"], empty="(all delivered)")
    for item in body["attention"]:
        who = f"{item['platform']} {item['sender_id']}"
        print(f"needs a human: {item['id']} {who}: {item['text']!r} ({item['reason']})")
    return 0


def _resend(args: argparse.Namespace) -> int:
    if not args.reply_id or "/" in args.reply_id:
        raise CliError(f"{args.reply_id!r} is not an id", 2)
    body = remote_from_args(args).post(f"{_base(args)}/{args.reply_id}/resend")
    if args.json:
        print_json(body)
    else:
        print(f"{body['id']}: {'delivered' if body['delivered'] else 'not delivered, kept: ' + body['outcome']}")
    return 0 if body["delivered"] else 1
