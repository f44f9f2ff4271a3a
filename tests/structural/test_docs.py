"""The Markdown docs render as written: every table is whole (a header, a separator row, rows of the
same width, blank lines around it), and every setting the code reads is in docs/configuration.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")
SETTING = re.compile(r"^(GENWORKER|HTTP|REDIS|LOG|WORKER|SCRIPT)_[A-Z0-9_]+$")
# environment the runtime sets for the script tools it runs (sandbox.md); the CLI's own (cli.md)
NOT_SETTINGS = {
    "GENWORKER_RPC_FD": "sandbox.md",
    "GENWORKER_RPC_TOKEN": "sandbox.md",
    "GENWORKER_TOOLS": "sandbox.md",
    "GENWORKER_URL": "cli.md",
    "GENWORKER_API_KEY": "cli.md",
}


def cells(line: str) -> int:
    """How many cells a table row has: `|` split, except `\\|` (GitHub splits inside code spans too)."""
    return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))


def table_problems(text: str) -> list[str]:
    problems = []
    lines = text.splitlines()
    fenced = False
    block: list[tuple[int, str]] = []
    for number, line in enumerate([*lines, ""], start=1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            block.append((number, line))
            continue
        if block:
            problems += _block_problems(block, lines, line)
            block = []
    return problems


def _block_problems(block: list[tuple[int, str]], lines: list[str], after: str) -> list[str]:
    first, header = block[0]
    if len(block) < 2 or not SEPARATOR.match(block[1][1]):
        return [f"line {first}: table rows with no header and separator row above them (split by a paragraph?)"]
    problems = []
    if first > 1 and lines[first - 2].strip():
        problems.append(f"line {first}: a table needs a blank line before it")
    if after.strip():
        problems.append(f"line {block[-1][0] + 1}: text right after a table becomes one of its rows")
    width = cells(header)
    problems += [f"line {n}: {cells(row)} cells, the header has {width}" for n, row in block if cells(row) != width]
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_whole(doc: Path) -> None:
    assert table_problems(doc.read_text(encoding="utf-8")) == []


def test_the_checker_finds_a_table_split_by_a_paragraph() -> None:
    split = "| key | meaning |\n|---|---|\n| `A` | a |\n\nA paragraph.\n| `B` | b |\n"
    (problem,) = table_problems(split)
    assert problem.startswith("line 6: table rows with no header and separator row above them")
    assert table_problems("| a | b |\n|---|---|\n| 1 |\n") == ["line 3: 1 cells, the header has 2"]
    assert table_problems("| a | b |\n|---|---|\n| `x\\|y` | 2 |\nnext\n") == [
        "line 4: text right after a table becomes one of its rows"
    ]
    assert table_problems("```\n| not a table |\n```\n") == []


def settings_read_by_the_code() -> set[str]:
    """String literals that name a setting anywhere in src/genworker (settings.py, settings.get /
    number / flag, MemoryConfig's readers, module constants); not pieces of f-strings, not `__all__`."""
    found = set()
    for path in (ROOT / "src" / "genworker").rglob("*.py"):
        if "testing" in path.relative_to(ROOT / "src" / "genworker").parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = {
            id(part)
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets))
            for part in ast.walk(node)
        }
        for node in ast.walk(tree):
            named = isinstance(node, ast.Constant) and isinstance(node.value, str) and SETTING.match(node.value)
            if named and id(node) not in skipped:
                found.add(node.value)
    return found


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text("utf-8")))
    read = settings_read_by_the_code()
    assert {"HTTP_PORT", "GENWORKER_MEMORY_TIMEOUT_S", "GENWORKER_WAITING_SCAN_S"} <= read  # the scan sees them
    missing = sorted(read - documented - set(NOT_SETTINGS))
    assert missing == [], f"settings the code reads that docs/configuration.md does not name: {missing}"
    for key, doc in NOT_SETTINGS.items():
        assert key in (ROOT / "docs" / doc).read_text(encoding="utf-8"), f"{key} should be described in docs/{doc}"
