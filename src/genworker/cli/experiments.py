"""`genworker experiments run|start|show|list WORKER ...`: a worker's experiments on a running server
(docs/experiments.md). `run` sends a spec file (JSON; `-` reads stdin) and by default waits for the
result; `--json` prints the server's answer as it came, otherwise a summary and a table of variants."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from genworker.cli.http import CliError, add_remote_arguments, remote_from_args, worker_path
from genworker.cli.output import print_json, print_table, timestamp

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("experiments", help="try one question with several isolated variants")
    actions = group.add_subparsers(dest="experiments_command", required=True)
    run = _parser(actions, "run", "create an experiment from a JSON spec file and (by default) wait for it")
    run.add_argument("spec", help="the spec file (JSON), or - for stdin")
    run.add_argument("--id", help="the experiment's id (default: a new exp_... id)")
    run.add_argument("--no-wait", action="store_true", help="answer at once; `show` it later")
    run.set_defaults(handler=_run)
    start = _parser(actions, "start", "run an experiment whose protocol a person has reviewed")
    start.add_argument("experiment_id")
    start.add_argument("--no-wait", action="store_true", help="answer at once; `show` it later")
    start.set_defaults(handler=_start)
    show = _parser(actions, "show", "one experiment: its variants, their evaluation, the winner")
    show.add_argument("experiment_id")
    show.set_defaults(handler=_show)
    _parser(actions, "list", "the worker's experiments, newest first").set_defaults(handler=_list)


def _parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument("worker", help="WORKER or TENANT/WORKER")
    add_remote_arguments(parser)
    return parser


def _base(args: argparse.Namespace) -> str:
    return f"/api/v1/workers/{worker_path(args.worker)}/experiments"


def _id(value: str) -> str:
    if not value or "/" in value:
        raise CliError(f"{value!r} is not an id", 2)
    return value


def _run(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.spec == "-" else Path(args.spec).read_text(encoding="utf-8")
        spec = json.loads(text)
    except OSError as exc:
        raise CliError(f"{args.spec}: {exc.strerror or exc}", 2) from None
    except ValueError as exc:
        raise CliError(f"{args.spec}: not JSON: {exc}", 2) from None
    if not isinstance(spec, dict):
        raise CliError(f"{args.spec}: the spec is a JSON object", 2)
    if args.id:
        spec["experiment_id"] = _id(args.id)
    remote = remote_from_args(args)
    wait = "false" if args.no_wait else "true"
    return _print(args, remote.request("POST", _base(args), body=spec, params={"wait": wait}))


def _start(args: argparse.Namespace) -> int:
    remote = remote_from_args(args)
    wait = "false" if args.no_wait else "true"
    path = f"{_base(args)}/{_id(args.experiment_id)}/start"
    return _print(args, remote.request("POST", path, params={"wait": wait}))


def _show(args: argparse.Namespace) -> int:
    return _print(args, remote_from_args(args).get(f"{_base(args)}/{_id(args.experiment_id)}"))


def _list(args: argparse.Namespace) -> int:
    body = remote_from_args(args).get(_base(args))
    if args.json:
        print_json(body)
        return 0
    rows = [
        {
            "experiment": e["experiment_id"], "state": e["state"], "winner": e["winner"] or "-",
            "variants": ",".join(e["variants"]), "created": timestamp(e["created_at"]), "question": e["question"][:60],
        }
        for e in body["experiments"]
    ]  # fmt: skip
    print_table(rows, ["experiment", "state", "winner", "variants", "created", "question"], empty="(no experiments)")
    return 0


def _print(args: argparse.Namespace, body: Any) -> int:
    """The experiment's summary; exit 1 when it failed (no variant succeeded), so scripts can tell."""
    e = body["experiment"]
    if args.json:
        print_json(body)
    else:
        winner = f", winner {e['winner']}" if e["winner"] else ""
        print(f"{e['experiment_id']}: {e['state']}{winner}" + (f" ({e['reason']})" if e["reason"] else ""))
        if e["review_confirmation_id"] and e["state"] == "awaiting_review":
            print(f"a model wrote its protocol: approve confirmation {e['review_confirmation_id']}, then `start` it")
        rows = [_row(v) for v in e["variants"]]
        print_table(rows, ["variant", "run", "success", "score", "tokens", "tool_calls", "note"])
        if e["candidate"]:
            print(f"candidate: {e['candidate']['path']} (of {e['candidate']['production']})")
    return 1 if e["state"] == "failed" else 0


def _row(variant: dict[str, Any]) -> dict[str, Any]:
    evaluation = variant["evaluation"] or {}
    metrics = evaluation.get("metrics", {})
    return {
        "variant": variant["name"],
        "run": variant["run_state"] or "-",
        "success": "-" if not evaluation else "yes" if evaluation["success"] else "no",
        "score": evaluation.get("score", "-"),
        "tokens": int(metrics["tokens"]) if "tokens" in metrics else "-",
        "tool_calls": int(metrics["tool_calls"]) if "tool_calls" in metrics else "-",
        "note": evaluation.get("reason", ""),
    }
