"""Builtin file tools: confined to the worker folder, capped, atomic, through the real pipeline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import ToolCall
from genworker.tools.builtin import builtin_tools
from genworker.tools.builtin.files import (
    MAX_LIST_ENTRIES,
    MAX_READ_BYTES,
    MAX_SEARCH_HITS,
    MAX_WRITE_BYTES,
    FileToolError,
    confine,
)
from genworker.tools.context import ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolFailed, ToolOutcome
from genworker.tools.pipeline import ToolPipeline

pytestmark = pytest.mark.anyio


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    folder = tmp_path / "ws/tenants/acme/workers/w"
    (folder / "duties").mkdir(parents=True)
    (folder / "files").mkdir()
    (folder / "PERSONA.md").write_text("---\nidentity: {}\n---\nBe kind.\n", encoding="utf-8")
    (folder / "duties/report.md").write_text("Weekly report duty\n", encoding="utf-8")
    (folder / "CHANNEL_CREDENTIALS.json").write_text('{"feishu": {"app_secret": "s3cr3t"}}', encoding="utf-8")
    (folder / "files/notes.txt").write_text("alpha\nBeta line\ngamma\n", encoding="utf-8")
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "loot.txt").write_text("stolen beta\n", encoding="utf-8")
    return folder


class Files:
    def __init__(self, worker: Path) -> None:
        self.pipeline = ToolPipeline(builtin_tools())
        self.scope = ToolScope("acme", "w", "run", worker, trust_level=1)

    async def call(self, name: str, **args: Any) -> ToolOutcome:
        return await self.pipeline.execute(self.scope, ToolCall("c", name, args))

    async def ok(self, name: str, **args: Any) -> str:
        outcome = await self.call(name, **args)
        assert isinstance(outcome, ToolCompleted), outcome
        return outcome.result.content

    async def refused(self, name: str, **args: Any) -> str:
        outcome = await self.call(name, **args)
        assert isinstance(outcome, ToolFailed), outcome
        assert outcome.code == "error"
        assert outcome.error.startswith("FileToolError: ")
        return outcome.error


@pytest.fixture
def files(worker: Path) -> Files:
    return Files(worker)


# -- where a path may point --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "contains '..'"),
        ("files/../../x", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("/etc/shadow", "is absolute"),
        ("C:/Windows/win.ini", "is absolute"),
        ("files\\notes.txt", "use '/' as the separator"),
        ("files/notes.txt\x00.png", "NUL"),
        ("", "non-empty relative path"),
        ("CHANNEL_CREDENTIALS.json", "is protected"),
        ("channel_credentials.JSON", "is protected"),
    ],
)
async def test_read_refuses_paths(files: Files, path: str, reason: str) -> None:
    assert reason in await files.refused("file_read", path=path)


async def test_symlink_leaving_the_folder_is_refused_everywhere(files: Files, worker: Path, outside: Path) -> None:
    (worker / "files/link.txt").symlink_to(outside / "loot.txt")
    (worker / "files/out").symlink_to(outside)
    (worker / "files/etc").symlink_to("/etc")
    assert "leads outside" in await files.refused("file_read", path="files/link.txt")
    assert "leads outside" in await files.refused("file_read", path="files/out/loot.txt")
    assert "leads outside" in await files.refused("file_read", path="files/etc/passwd")
    assert "leads outside" in await files.refused("file_write", path="files/out/new.txt", content="x")
    assert "leads outside" in await files.refused("file_list", path="files/out")
    listing = await files.ok("file_list", path="files")
    assert "link.txt" not in listing and "files/out" not in listing
    search = await files.ok("file_search", query="beta")
    assert "loot" not in search and "stolen" not in search
    assert not (outside / "new.txt").exists()


async def test_symlink_inside_the_folder_is_followed(files: Files, worker: Path) -> None:
    (worker / "files/alias.txt").symlink_to(worker / "files/notes.txt")
    assert await files.ok("file_read", path="files/alias.txt") == "alpha\nBeta line\ngamma\n"


async def test_symlink_to_credentials_is_refused(files: Files, worker: Path) -> None:
    (worker / "files/creds").symlink_to(worker / "CHANNEL_CREDENTIALS.json")
    assert "is protected" in await files.refused("file_read", path="files/creds")


def test_confine_returns_the_real_path(worker: Path) -> None:
    assert confine(worker, "files/notes.txt") == (worker / "files/notes.txt").resolve()
    assert confine(worker, "./files//notes.txt") == (worker / "files/notes.txt").resolve()
    assert confine(worker, "files/new/deep.txt", write=True) == (worker / "files/new/deep.txt").resolve()
    with pytest.raises(FileToolError, match="does not exist"):
        confine(worker / "missing", "x")


# -- file_read ---------------------------------------------------------------------


async def test_read_by_lines(files: Files) -> None:
    assert await files.ok("file_read", path="duties/report.md") == "Weekly report duty\n"
    assert await files.ok("file_read", path="files/notes.txt", offset=1, limit=1) == (
        "Beta line\n\n[truncated: call file_read with offset=2 to continue]"
    )
    assert await files.ok("file_read", path="files/notes.txt", offset=10) == ""


async def test_read_is_capped_by_lines_and_bytes(files: Files, worker: Path) -> None:
    (worker / "files/long.txt").write_text("".join(f"line {i}\n" for i in range(3000)), encoding="utf-8")
    text = await files.ok("file_read", path="files/long.txt")
    assert text.count("\n") == 2000 + 1
    assert text.endswith("[truncated: call file_read with offset=2000 to continue]")
    rest = await files.ok("file_read", path="files/long.txt", offset=2000)
    assert rest.startswith("line 2000\n") and rest.endswith("line 2999\n")
    (worker / "files/wide.txt").write_bytes((b"x" * 1023 + b"\n") * 1024)  # 1 MiB
    wide = await files.ok("file_read", path="files/wide.txt")
    assert len(wide.encode()) < MAX_READ_BYTES + 100
    assert "offset=256" in wide


async def test_read_refuses_bad_ranges_binaries_folders_and_fifos(files: Files, worker: Path) -> None:
    assert "offset must be >= 0" in await files.refused("file_read", path="files/notes.txt", offset=-1)
    assert "limit must be between" in await files.refused("file_read", path="files/notes.txt", limit=0)
    (worker / "files/pic.png").write_bytes(b"\x89PNG\x00\x00data")
    assert "binary" in await files.refused("file_read", path="files/pic.png")
    assert "is a directory" in await files.refused("file_read", path="files")
    assert "no such file" in await files.refused("file_read", path="files/none.txt")
    os.mkfifo(worker / "files/pipe")
    assert "not a regular file" in await files.refused("file_read", path="files/pipe")


# -- file_write --------------------------------------------------------------------


async def test_write_only_under_files(files: Files, worker: Path) -> None:
    for path in ("PERSONA.md", "duties/report.md", "new.txt", "files", "goals/g.md"):
        assert "only be written under files/" in await files.refused("file_write", path=path, content="x")
    assert (worker / "PERSONA.md").read_text(encoding="utf-8").endswith("Be kind.\n")


async def test_write_refuses_files_symlinked_elsewhere_in_the_folder(files: Files, worker: Path) -> None:
    (worker / "files/duties").symlink_to(worker / "duties")
    assert "only be written under files/" in await files.refused(
        "file_write", path="files/duties/report.md", content="hijack"
    )
    assert (worker / "duties/report.md").read_text(encoding="utf-8") == "Weekly report duty\n"


async def test_write_overwrite_append_and_folders(files: Files, worker: Path) -> None:
    assert await files.ok("file_write", path="files/out/report.md", content="# Report\n") == (
        "wrote files/out/report.md (9 bytes)"
    )
    await files.ok("file_write", path="files/out/report.md", content="more\n", mode="append")
    assert (worker / "files/out/report.md").read_text(encoding="utf-8") == "# Report\nmore\n"
    await files.ok("file_write", path="files/out/report.md", content="fresh\n")
    assert (worker / "files/out/report.md").read_text(encoding="utf-8") == "fresh\n"
    await files.ok("file_write", path="files/new.txt", content="x", mode="append")
    assert (worker / "files/new.txt").read_text(encoding="utf-8") == "x"
    bad_mode = await files.call("file_write", path="files/a.txt", content="x", mode="truncate")
    assert isinstance(bad_mode, ToolFailed) and bad_mode.code == "invalid_arguments"


async def test_write_is_atomic(files: Files, worker: Path) -> None:
    target = worker / "files/notes.txt"
    with target.open("rb") as before:
        await files.ok("file_write", path="files/notes.txt", content="replaced\n")
        assert before.read() == b"alpha\nBeta line\ngamma\n"  # the old inode was swapped, not rewritten
    assert target.read_text(encoding="utf-8") == "replaced\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["notes.txt"]  # no temp files left behind
    too_big = "x" * (MAX_WRITE_BYTES + 1)
    assert "the limit is" in await files.refused("file_write", path="files/notes.txt", content=too_big)
    assert target.read_text(encoding="utf-8") == "replaced\n"


async def test_write_needs_trust_level_1(worker: Path) -> None:
    pipeline = ToolPipeline(builtin_tools())
    low = ToolScope("acme", "w", "run", worker, trust_level=0)
    assert [s.name for s in pipeline.visible(low)] == ["file_read", "file_list", "file_search"]
    proposal = ToolScope("acme", "w", "run", worker, trust_level=3, posture="proposal_only")
    assert [s.name for s in pipeline.visible(proposal)] == ["file_read", "file_list", "file_search"]


# -- file_list and file_search -----------------------------------------------------


async def test_list(files: Files, worker: Path) -> None:
    (worker / "files/.hidden").write_text("h", encoding="utf-8")
    assert (await files.ok("file_list")).splitlines() == ["PERSONA.md (30 bytes)", "duties/", "files/"]
    assert await files.ok("file_list", path="files") == "files/notes.txt (22 bytes)"
    assert (await files.ok("file_list", pattern="*.md")).splitlines() == [
        "PERSONA.md (30 bytes)",
        "duties/report.md (19 bytes)",
    ]
    assert await files.ok("file_list", pattern="duties/*") == "duties/report.md (19 bytes)"
    assert await files.ok("file_list", path="duties", pattern="*.txt") == "(empty)"
    assert "not a folder" in await files.refused("file_list", path="PERSONA.md")
    assert "relative glob" in await files.refused("file_list", pattern="../*")


async def test_list_is_capped(files: Files, worker: Path) -> None:
    many = worker / "files/many"
    many.mkdir()
    for i in range(MAX_LIST_ENTRIES + 5):
        (many / f"f{i:04}.txt").write_text("", encoding="utf-8")
    lines = (await files.ok("file_list", path="files/many")).splitlines()
    assert len(lines) == MAX_LIST_ENTRIES + 1
    assert lines[-1].startswith("[more than")


async def test_search(files: Files, worker: Path) -> None:
    assert await files.ok("file_search", query="BETA") == "files/notes.txt:2: Beta line"
    assert await files.ok("file_search", query="report", glob="*.md") == "duties/report.md:1: Weekly report duty"
    assert await files.ok("file_search", query="beta", path="duties") == "no matches for 'beta'"
    assert await files.ok("file_search", query="s3cr3t") == "no matches for 's3cr3t'"
    assert "1 to 500" in await files.refused("file_search", query="")


async def test_search_is_capped(files: Files, worker: Path) -> None:
    (worker / "files/hay.txt").write_text("needle\n" * (MAX_SEARCH_HITS + 50), encoding="utf-8")
    hits = (await files.ok("file_search", query="needle")).splitlines()
    assert len(hits) == MAX_SEARCH_HITS + 1
    assert hits[-1] == f"[stopped at {MAX_SEARCH_HITS} matches]"
