"""Shared plumbing for reading upstream-format files: number coercion, case-insensitive enums,
comma lists, the compatibility-note recorder and where its notes land (issue #22)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BeforeValidator, ValidationError, field_validator, model_validator

from genworker.workspace.documents import explaining, read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models import PersonaSpec
from genworker.workspace.models.base import CsvTuple, LowerStr, Model, WorkspaceId, lower, note, split_csv
from genworker.workspace.scan import Collector


class Leaf(Model):
    status: str = "pending"

    @field_validator("status", mode="before")
    @classmethod
    def _map(cls, value: Any) -> Any:
        if value == "completed":
            note("status", "mapped", "'completed' -> 'done'")
            return "done"
        return value


class Branch(Model):
    compat_keys = frozenset({"old_name"})

    name: str = ""
    mode: Annotated[Literal["fast", "slow"], BeforeValidator(lower)] = "fast"
    tags: CsvTuple = ()
    leaves: tuple[Leaf, ...] = ()
    count: int = 0

    @model_validator(mode="before")
    @classmethod
    def _rename(cls, data: Any) -> Any:
        if isinstance(data, dict) and "old_name" in data:
            data = dict(data)
            note("old_name", "mapped", "old_name -> name")
            data["name"] = data.pop("old_name")
        if isinstance(data, dict) and data.get("count") == 13:
            note("count", "warning", "13 is unlucky")
        return data


class Root(Model):
    id: WorkspaceId
    version: str = "1"
    branch: Branch = Branch()
    triggers: tuple[dict[str, Any], ...] = ()

    @field_validator("triggers", mode="before")
    @classmethod
    def _ignored(cls, value: Any) -> Any:
        if value:
            note("triggers", "ignored", "upstream keeps it but never uses it")
        return value


def _doc(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "doc.md"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return read_markdown(path, "doc.md")


DOC = """\
---
id: 42
version: 2
triggers: [{action: x}]
branch:
  old_name: b
  mode: Slow
  tags: "a, b ,c"
  count: 13
  leaves:
    - status: pending
    - status: completed
---
"""


def test_notes_land_at_the_path_and_line_of_the_model_that_made_them(tmp_path: Path) -> None:
    root, issues = validate(Root, _doc(tmp_path, DOC))
    assert (root.id, root.version) == ("42", "2")  # numbers where text is expected
    assert root.branch.name == "b" and root.branch.mode == "slow" and root.branch.tags == ("a", "b", "c")
    assert root.branch.leaves[1].status == "done"
    by_field = {(i.severity, i.field): (i.message, i.line) for i in issues}
    assert by_field == {
        ("note", "triggers"): ("ignored: upstream keeps it but never uses it", 4),
        ("note", "branch.old_name"): ("mapped: old_name -> name", 6),
        ("note", "branch.mode"): ("mapped: 'Slow' -> 'slow'", 7),
        ("warning", "branch.count"): ("13 is unlucky", 9),
        ("note", "branch.leaves[1].status"): ("mapped: 'completed' -> 'done'", 12),
    }


def test_notes_are_not_recorded_outside_validate() -> None:
    assert Root.model_validate({"id": "x", "branch": {"mode": "SLOW"}}).branch.mode == "slow"


def test_a_file_with_errors_still_reports_its_unknown_fields(tmp_path: Path) -> None:
    doc = _doc(
        tmp_path,
        """\
        ---
        id: ../x
        colour: red
        branch:
          old_name: fine
          count: many
          extra: 1
        ---
        """,
    )
    with pytest.raises(WorkspaceError) as caught:
        validate(Root, doc)
    found = {(i.severity, i.field, i.line) for i in caught.value.issues}
    assert found == {
        ("error", "id", 2),
        ("error", "branch.count", 6),
        ("warning", "colour", 3),
        ("warning", "branch.extra", 7),  # old_name is a compat key of Branch: not unknown
    }


def test_a_persona_with_an_error_reports_unknown_fields_of_nested_lists(tmp_path: Path) -> None:
    doc = _doc(
        tmp_path,
        """\
        ---
        identity:
          worker_id: w
          name: W
        mode: nonsense
        monitor_configs:
          - source_type: webhook
            polll_interval: 5m
        ---
        """,
    )
    with pytest.raises(WorkspaceError) as caught:
        validate(PersonaSpec, doc)
    assert ("warning", "monitor_configs[0].polll_interval", 8) in {
        (i.severity, i.field, i.line) for i in caught.value.issues
    }
    assert [i.field for i in caught.value.issues if i.severity == "error"] == ["mode"]


def test_explaining_notes_the_fields_understood(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "---\nid: a\nversion: '3'\nodd: 1\n---\n")
    _, quiet = validate(Root, doc)
    assert [i.severity for i in quiet] == ["warning"]
    with explaining():
        _, issues = validate(Root, doc)
    assert Issue("note", "doc.md", "understood: id, version") in issues


def test_blank_lines_before_the_front_matter_keep_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text("\n\n  \n---\nid: a\nbranch:\n  count: x\n---\nBody\n", encoding="utf-8")
    doc = read_markdown(path, "doc.md")
    assert doc.data["id"] == "a" and doc.body == "Body"
    with pytest.raises(WorkspaceError) as caught:
        validate(Root, doc)
    assert [(i.field, i.line) for i in caught.value.issues] == [("branch.count", 7)]


def test_lower_str_split_csv_and_bools() -> None:
    class M(Model):
        word: LowerStr = ""
        items: CsvTuple = ()
        text: str = ""

    assert M(word="WebSocket", items=" x,,y ").model_dump() == {"word": "websocket", "items": ("x", "y"), "text": ""}
    assert M(items=[" a ", "b"]).items == ("a", "b")
    assert split_csv(3) == 3
    with pytest.raises(ValidationError):
        M(text=True)  # a bool is not text, even with numbers coerced


def test_collector_keeps_notes_apart_from_warnings() -> None:
    issues = Collector()
    issues.warn("a.md", "odd")
    issues.note("a.md", "mapped: x -> y", "f")
    assert [i.severity for i in issues.warnings] == ["warning"]
    assert [i.message for i in issues.notes] == ["mapped: x -> y"]
    assert issues.errors == []


class Listing(Model):
    items: tuple[str, ...] = ()

    @field_validator("items", mode="before")
    @classmethod
    def _second(cls, value: Any) -> Any:
        note("items.1", "mapped", "second item noted")
        return value


def test_a_note_on_a_list_item_points_at_the_item(tmp_path: Path) -> None:
    _, (issue,) = validate(Listing, _doc(tmp_path, "---\nitems:\n  - a\n  - b\n---\n"))
    assert (issue.field, issue.line) == ("items[1]", 4)
