"""Commands that work on the workspace folder directly (no server): `memory reindex`, and the
progress-reporting load behind `check --progress`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from genworker.cli.http import CliError
from genworker.cli.output import Progress, progress_enabled
from genworker.ids import InvalidIdError, validate_id
from genworker.settings import Settings, load_settings

if TYPE_CHECKING:
    from genworker.workspace.registry import Summary, WorkspaceRegistry

__all__ = ["add_progress_arguments", "load_with_progress", "register"]


def add_progress_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = commands.add_parser("memory", help="a worker's memory on this machine's workspace")
    actions = memory.add_subparsers(dest="memory_command", required=True)
    reindex = actions.add_parser("reindex", help="rebuild the memory search index from the episode files")
    reindex.add_argument("worker", nargs="?", help="WORKER or TENANT/WORKER (or use --all)")
    reindex.add_argument("--all", action="store_true", help="every worker of every tenant")
    reindex.add_argument("--workspace", type=Path, help="workspace folder (default GENWORKER_WORKSPACE)")
    reindex.add_argument("--json", action="store_true", help="machine-readable output")
    add_progress_arguments(reindex)
    reindex.set_defaults(handler=_reindex)


def _targets(args: argparse.Namespace, workspace: Path) -> list[tuple[str, str]]:
    if args.all == bool(args.worker):
        raise CliError("name one WORKER (or TENANT/WORKER) or pass --all", 2)
    if args.all:
        found = sorted(
            (tenant.name, worker.name)
            for tenant in (workspace / "tenants").glob("*")
            for worker in (tenant / "workers").glob("*")
            if worker.is_dir() and not tenant.name.startswith(".") and not worker.name.startswith(".")
        )
        if not found:
            raise CliError(f"no workers under {workspace / 'tenants'}")
        return found
    tenant_id, sep, worker_id = args.worker.rpartition("/")
    try:
        if sep:
            validate_id(tenant_id, "tenant id")
        validate_id(worker_id, "worker id")
    except InvalidIdError as exc:
        raise CliError(f"worker {args.worker!r}: {exc}", 2) from None
    return [(tenant_id or _tenant_of(workspace, worker_id), worker_id)]


def _tenant_of(workspace: Path, worker_id: str) -> str:
    """The one tenant with a worker `worker_id`; name it as TENANT/WORKER when there are several."""
    tenants = sorted(
        folder.name
        for folder in (workspace / "tenants").glob("*")
        if not folder.name.startswith(".") and (folder / "workers" / worker_id).is_dir()
    )
    if not tenants:
        raise CliError(f"no worker {worker_id!r} in any tenant under {workspace / 'tenants'}")
    if len(tenants) > 1:
        raise CliError(f"worker {worker_id!r} is in tenants {', '.join(tenants)}: name it as TENANT/WORKER", 2)
    return tenants[0]


def _reindex(args: argparse.Namespace) -> int:
    from genworker.memory import MemoryConfig, MemoryStoreError, reindex

    settings = _settings(args)
    workspace = settings.workspace
    if not workspace.is_dir():
        raise CliError(f"workspace folder {workspace} does not exist")
    config = MemoryConfig.from_values(settings.values)
    show = progress_enabled(args.progress)
    results = []
    for tenant_id, worker_id in _targets(args, workspace):
        bar = Progress(f"reindex {tenant_id}/{worker_id}", enabled=show)
        try:
            count = reindex(workspace, tenant_id, worker_id, bar, config=config)
        except (MemoryStoreError, FileNotFoundError, OSError) as exc:
            raise CliError(f"memory reindex {tenant_id}/{worker_id}: {exc}") from None
        results.append({"tenant_id": tenant_id, "worker_id": worker_id, "episodes": count})
        if not args.json:
            print(f"{tenant_id}/{worker_id}: {count} episodes indexed")
    if args.json:
        print(json.dumps({"reindexed": results}, indent=2))
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    if args.workspace is not None:
        return load_settings(None, None, workspace=args.workspace.resolve())
    return load_settings()


def load_with_progress(registry: WorkspaceRegistry, enabled: bool) -> Summary:
    """`registry.load_all()`, tenant by tenant so a bar can advance; the same result.

    A tree whose tenant folders the plain load would refuse (bad ids, escaping symlinks) or
    that has no tenants/ folder is loaded by `load_all` itself, which reports those issues.
    """
    from genworker.workspace.scan import Collector, Scope

    if not enabled:
        return registry.load_all()
    tenants_dir = registry.root / "tenants"
    scan = Collector()
    folders = list(Scope(registry.root).entries(tenants_dir, scan, dirs=True, id_kind="tenant id"))
    if scan.issues or not tenants_dir.is_dir():
        return registry.load_all()
    bar = Progress("check", stream=sys.stderr)
    registry.reload_system()
    for done, folder in enumerate(folders, start=1):
        registry.reload_tenant(folder.name)
        bar(done, len(folders))
    if not folders:
        bar(0, 0)
    return registry.summary()
