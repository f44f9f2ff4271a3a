"""The `genworker` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from genworker import __version__
from genworker.cli import chat as cli_chat
from genworker.cli import experiments as cli_experiments
from genworker.cli import keys as cli_keys
from genworker.cli import local as cli_local
from genworker.cli import output as cli_output
from genworker.cli import remote as cli_remote
from genworker.cli import replies as cli_replies
from genworker.cli import spaces as cli_spaces
from genworker.cli.http import CliError
from genworker.observability.logging import configure_logging
from genworker.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from genworker.workspace.errors import Issue

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except SettingsError as exc:
        print(f"genworker: configuration error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"genworker: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("genworker: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `genworker ... | head`: the reader left; stay quiet like other tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="genworker", description="Runtime for digital workers.")
    parser.add_argument("--version", action="version", version=f"genworker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="validate a workspace and list every problem")
    check.add_argument("--workspace", type=Path, help="workspace folder (default: from settings)")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument(
        "--explain",
        action="store_true",
        help="also say, per file, which fields were understood, mapped from another spelling, or ignored",
    )
    cli_local.add_progress_arguments(check)
    check.set_defaults(handler=_check)

    run = commands.add_parser("run", help="serve the runtime over HTTP")
    run.add_argument("--host", help="bind address (default HTTP_HOST or 127.0.0.1)")
    run.add_argument("--port", type=int, help="port (default HTTP_PORT or 8000)")
    run.add_argument("--workspace", type=Path, help="workspace folder (default GENWORKER_WORKSPACE)")
    run.set_defaults(handler=_run)
    cli_keys.register(commands)
    cli_chat.register(commands)
    cli_remote.register(commands)
    cli_replies.register(commands)
    cli_spaces.register(commands)
    cli_experiments.register(commands)
    cli_local.register(commands)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    if getattr(args, "workspace", None) is not None:
        overrides["workspace"] = args.workspace.resolve()
    if getattr(args, "host", None):
        overrides["http_host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides["http_port"] = args.port
    return load_settings(None, None, **overrides)


def _check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not settings.workspace.is_dir():
        print(f"genworker: workspace folder {settings.workspace} does not exist", file=sys.stderr)
        return 1
    # Each command imports what it needs when it runs: `genworker run` answers /health sooner.
    from genworker.autonomy.sensing.filters import filter_issues
    from genworker.channels.longconn.check import longconn_issues
    from genworker.workspace.documents import explaining
    from genworker.workspace.registry import WorkspaceRegistry

    registry = WorkspaceRegistry.from_settings(settings)
    with explaining() if args.explain else nullcontext():
        summary = cli_local.load_with_progress(registry, cli_output.progress_enabled(args.progress))
    issues = registry.issues() + [i for w in registry.workers() for i in filter_issues(registry.root, w)]
    issues += longconn_issues(registry)  # long connections without their SDK or credentials
    notes = registry.notes() if args.explain else []
    errors = [i for i in issues if i.severity == "error"]
    if args.json:
        report = {"ok": not errors, "summary": asdict(summary), "issues": [i.as_dict() for i in issues]}
        if args.explain:
            report["notes"] = [i.as_dict() for i in notes]
        print(json.dumps(report, indent=2))
        return 1 if errors else 0
    _print_grouped(_explained(notes) + issues)
    warnings = len(issues) - len(errors)
    counts = ", ".join(
        _count(n, what)
        for n, what in (
            (summary.tenants, "tenant"),
            (summary.workers, "worker"),
            (summary.duties, "duty"),
            (summary.goals, "goal"),
            (summary.skills, "skill"),
        )
    )
    if errors:
        failed = f"{_count(summary.failed_workers, 'worker')} failed"
        print(f"FAILED: {_count(len(errors), 'error')}, {_count(warnings, 'warning')} ({counts}; {failed})")
        return 1
    print(f"OK: {counts}" + (f" ({_count(warnings, 'warning')})" if warnings else ""))
    return 0


def _count(n: int, what: str) -> str:
    """`1 duty`, `2 duties`, `0 warnings`."""
    if n == 1:
        return f"1 {what}"
    return f"{n} {what[:-1]}ies" if what.endswith("y") else f"{n} {what}s"


_NOTE_ORDER = {"understood": 0, "mapped": 1, "ignored": 2}


def _explained(notes: list[Issue]) -> list[Issue]:
    """Notes as `understood` / `mapped` / `ignored` lines (the message starts with the kind)."""
    return sorted(notes, key=lambda n: _NOTE_ORDER.get(n.message.partition(":")[0], 3))


def _print_grouped(issues: list[Issue]) -> None:
    by_file: dict[str, list[Issue]] = defaultdict(list)
    for issue in issues:
        by_file[issue.file].append(issue)
    for file in sorted(by_file):
        print(file)
        for issue in by_file[file]:
            line = f"line {issue.line}: " if issue.line else ""
            field = f"{issue.field}: " if issue.field else ""
            kind: str = issue.severity
            message = issue.message
            if kind == "note":
                kind, _, message = message.partition(": ")
            print(f"  {kind}: {line}{field}{message}")


def _run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        configure_logging(settings.get("GENWORKER_LOG_FORMAT", "text") or "text", settings.log_level)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    from genworker.cli.serve import serve

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
