"""Only SessionAggregate writes session state: no other code calls a store's compare-and-set, or
makes the chunks a long thread's oldest messages are archived in."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "genworker"
AGGREGATE = SRC / "conversation" / "aggregate.py"


def save_calls(path: Path) -> list[int]:
    """Lines calling `<anything>.save(..., expected_version=...)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "save"
        and any(k.arg == "expected_version" for k in node.keywords)
    ]


def test_the_walk_sees_the_aggregate() -> None:
    assert save_calls(AGGREGATE)


def test_only_the_aggregate_saves_sessions() -> None:
    offenders = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path != AGGREGATE and (lines := save_calls(path))
    }
    assert offenders == {}


def chunk_constructions(path: Path) -> list[int]:
    """Lines calling `ArchiveChunk(...)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ArchiveChunk"
    ]


def test_only_the_aggregate_archives_messages() -> None:
    assert chunk_constructions(AGGREGATE)
    offenders = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path != AGGREGATE and (lines := chunk_constructions(path))
    }
    assert offenders == {}
