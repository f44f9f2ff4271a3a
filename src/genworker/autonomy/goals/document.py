"""Round-trip edits of one goal file: the author's body, comments, key order and unknown fields stay.

The front matter is loaded with ruamel.yaml's round-trip loader, changed in place, dumped with the
file's own indentation, and joined with the body bytes exactly as they were. The new text is
validated the way the workspace loader validates it before it replaces the file, so an edit can
never leave a goal the loader would refuse. An edit that changes nothing writes nothing: an
unchanged file cannot wake the hot-reload watcher.
"""

from __future__ import annotations

import io
import itertools
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError as RuamelError
from ruamel.yaml.util import load_yaml_guess_indent

from genworker.autonomy.goals.errors import GoalFileError
from genworker.fsutil import write_atomic
from genworker.workspace.documents import Document, validate
from genworker.workspace.errors import WorkspaceError
from genworker.workspace.models import Goal

__all__ = ["EditResult", "GoalText", "edit_goal_file", "parse_goal_text", "read_goal_id"]

Mutate = Callable[[Any], None]
"""Changes the round-trip front matter (a ruamel CommentedMap) in place; raises to refuse."""

_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class GoalText:
    """A goal file cut into its parts; `head + front + close + body` is the file, byte for byte."""

    head: str
    front: str
    close: str
    body: str

    @property
    def text(self) -> str:
        return self.head + self.front + self.close + self.body


@dataclass(frozen=True, slots=True)
class EditResult:
    goal: Goal
    changed: bool


def split_goal_text(text: str, rel: str) -> GoalText:
    lines = text.splitlines(keepends=True)
    start = 0  # blank lines before the opening '---' are fine, as the loader reads them
    while start < len(lines) - 1 and not lines[start].lstrip("\ufeff").strip():
        start += 1
    if not lines or lines[start].lstrip("\ufeff").rstrip() != "---":
        raise GoalFileError(rel, "missing YAML front matter (a '---' block at the top)")
    for i in range(start + 1, len(lines)):
        if lines[i].rstrip() == "---":
            return GoalText(
                "".join(lines[: start + 1]), "".join(lines[start + 1 : i]), lines[i], "".join(lines[i + 1 :])
            )
    raise GoalFileError(rel, "front matter is not closed: end it with a '---' line")


def parse_goal_text(text: str, rel: str) -> Goal:
    """Validate `text` exactly as the workspace loader validates a goal file."""
    parts = split_goal_text(text, rel)
    try:
        data = yaml.load(parts.front, Loader=_SafeLoader) or {}
    except yaml.YAMLError as exc:
        raise GoalFileError(rel, f"invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise GoalFileError(rel, f"front matter must be a mapping, got {type(data).__name__}")
    doc = Document(rel, data, parts.body.strip(), parts.front, parts.head.count("\n"))
    try:
        goal, _ = validate(Goal, doc, {**data, "body": doc.body})
    except WorkspaceError as exc:
        raise GoalFileError(rel, "; ".join(str(i) for i in exc.issues)) from None
    return goal


def read_goal_id(path: Path) -> str | None:
    """The `goal_id` a goal file declares, or None when it cannot be read."""
    try:
        parts = split_goal_text(path.read_text(encoding="utf-8"), path.name)
        data = yaml.load(parts.front, Loader=_SafeLoader)
    except (OSError, UnicodeDecodeError, GoalFileError, yaml.YAMLError):
        return None
    value = data.get("goal_id") if isinstance(data, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):  # upstream ids may be numbers
        return str(value)
    return value if isinstance(value, str) else None


def _round_trip(front: str, rel: str) -> tuple[Any, YAML]:
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap the author's long lines
    try:
        _, indent, block_seq_indent = load_yaml_guess_indent(front)  # only for the indentation
        data = rt.load(front)
    except RuamelError as exc:
        raise GoalFileError(rel, f"invalid YAML: {exc}") from None
    if not hasattr(data, "keys"):
        raise GoalFileError(rel, "front matter must be a mapping")
    offset = block_seq_indent or 0
    rt.indent(mapping=_mapping_indent(front), sequence=max(indent or 2, offset + 2), offset=offset)
    return data, rt


def _mapping_indent(front: str) -> int:
    """How far the author indents a nested mapping (ruamel guesses only the sequence indent)."""
    lines = [ln for ln in front.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line, following in itertools.pairwise(lines):
        stripped = following.lstrip()
        if line.rstrip().endswith(":") and not line.lstrip().startswith("- ") and not stripped.startswith("- "):
            step = len(following) - len(stripped) - (len(line) - len(line.lstrip()))
            if step > 0:
                return step
    return 2


def edit_goal_file(path: Path, rel: str, mutate: Mutate) -> EditResult:
    """Apply `mutate` to the file's front matter; write only when the text changed. The caller
    holds the goal's lock."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoalFileError(rel, "the goal file is gone") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GoalFileError(rel, f"cannot read: {exc}") from None
    parts = split_goal_text(text, rel)
    data, rt = _round_trip(parts.front, rel)
    mutate(data)
    out = io.StringIO()
    rt.dump(data, out)
    new_text = GoalText(parts.head, out.getvalue(), parts.close, parts.body).text
    goal = parse_goal_text(new_text, rel)
    if new_text == text:
        return EditResult(goal, False)
    mode = stat.S_IMODE(path.stat().st_mode)
    write_atomic(path, new_text.encode("utf-8"), mode=mode)
    return EditResult(goal, True)
