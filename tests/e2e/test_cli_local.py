"""The CLI on the workspace folder: `memory reindex` with its progress bar, `check --progress`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.cli import main
from genworker.memory import MemoryService
from genworker.memory.models import Episode, Provenance, render_episode


def write_episodes(workspace: Path, tenant: str, worker: str, count: int) -> None:
    service = MemoryService(workspace)
    try:
        folder = service.worker(tenant, worker).episodes.folder
    finally:
        service.close()
    folder.mkdir(parents=True, exist_ok=True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(count):
        at = t0 + timedelta(minutes=n)
        episode = Episode(
            episode_id=f"ep_{at:%Y%m%d%H%M%S}_{n:08x}",
            tenant_id=tenant,
            worker_id=worker,
            scope=f"worker:{worker}",
            title=f"note {n}",
            created_at=at,
            provenance=Provenance(run_id=f"run_{n}"),
            body=f"Invoice {n} from the vendor was paid.",
        )
        (folder / f"{episode.episode_id}.md").write_text(render_episode(episode), encoding="utf-8")


def test_memory_reindex_shows_progress_and_reports_counts(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = small_workspace({"acme": ["alice", "bob"]})
    write_episodes(workspace, "acme", "alice", 120)
    write_episodes(workspace, "acme", "bob", 3)

    assert main(["memory", "reindex", "acme/alice", "--progress", "--workspace", str(workspace)]) == 0
    out, err = capsys.readouterr()
    assert out == "acme/alice: 120 episodes indexed\n"
    assert err.splitlines()[-1] == f"reindex acme/alice [{'#' * 30}] 120/120"

    assert main(["memory", "reindex", "--all", "--json", "--no-progress", "--workspace", str(workspace)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["reindexed"] == [
        {"tenant_id": "acme", "worker_id": "alice", "episodes": 120},
        {"tenant_id": "acme", "worker_id": "bob", "episodes": 3},
    ]
    assert err == ""


def test_memory_reindex_takes_a_worker_like_every_other_verb(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = small_workspace({"acme": ["alice", "bob"], "globex": ["bob"]})
    write_episodes(workspace, "acme", "alice", 2)
    write_episodes(workspace, "globex", "bob", 1)

    assert main(["memory", "reindex", "alice", "--no-progress", "--workspace", str(workspace)]) == 0
    assert capsys.readouterr() == ("acme/alice: 2 episodes indexed\n", "")
    assert main(["memory", "reindex", "globex/bob", "--no-progress", "--workspace", str(workspace)]) == 0
    assert capsys.readouterr() == ("globex/bob: 1 episodes indexed\n", "")
    assert main(["memory", "reindex", "bob", "--workspace", str(workspace)]) == 2
    assert capsys.readouterr() == (
        "",
        "genworker: worker 'bob' is in tenants acme, globex: name it as TENANT/WORKER\n",
    )


def test_memory_reindex_errors_are_one_line(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = small_workspace({"acme": ["alice"]})
    for argv, code, message in (
        (("acme/nobody",), 1, "genworker: memory reindex acme/nobody: no worker 'nobody' in tenant 'acme'"),
        (("nobody",), 1, "genworker: no worker 'nobody' in any tenant under "),
        (("acme/alice", "--all"), 2, "genworker: name one WORKER (or TENANT/WORKER) or pass --all"),
        (("acme/../x",), 2, "genworker: worker 'acme/../x': "),
    ):
        assert main(["memory", "reindex", *argv, "--workspace", str(workspace)]) == code
        out, err = capsys.readouterr()
        assert err.startswith(message) and err.count("\n") == 1, err
        assert out == ""


def test_check_with_progress_finds_the_same_as_without(
    small_workspace: Callable[..., Path], demo_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = small_workspace(
        {"acme": ["alice", "bob"], "globex": ["gina"], "initech": []},
        {"tenants/globex/workers/gina/PERSONA.md": "---\nidentity: {name: Gina}\nmode: nonsense\n---\nhi\n"},
    )
    for workspace in (demo_workspace, broken):
        results = []
        for flag in ("--no-progress", "--progress"):
            code = main(["check", "--json", flag, "--workspace", str(workspace)])
            out, err = capsys.readouterr()
            results.append((code, json.loads(out)))
            if flag == "--progress":
                assert err.splitlines()[-1].startswith("check [#") and err.count("\n") >= 1
        assert results[0] == results[1]
    assert results[0][0] == 1 and not results[0][1]["ok"]  # the broken tree fails the same way
