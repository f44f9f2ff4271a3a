"""A context space as a Markdown file: YAML front matter holding the whole `ContextSpace` (the
truth), and a body rendered from it for people (title, state, evidence, task candidates, changes)
that nothing reads back."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from genworker.autonomy.spaces.errors import SpaceFileError
from genworker.autonomy.spaces.models import ContextSpace

__all__ = ["parse_space", "render_space"]

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def render_space(space: ContextSpace) -> str:
    front = yaml.dump(
        space.model_dump(mode="json", exclude_defaults=False),
        Dumper=_Dumper,
        allow_unicode=True,
        sort_keys=False,
        width=1_000_000,
    )
    return f"---\n{front}---\n{_body(space)}"


def _body(space: ContextSpace) -> str:
    status = [space.state.value]
    if space.is_pinned:
        status.append(f"pinned ({space.pin_reason})")
    if space.review != "confirmed":
        status.append(f"review: {space.review}" + (f" into {space.merged_into}" if space.merged_into else ""))
    if space.due_at is not None:
        status.append(f"due {space.due_at:%Y-%m-%d %H:%M} UTC")
    status.append(f"score {space.space_score:.2f}")
    lines = [f"# {space.space_id}: {space.title}", "", " · ".join(status), "", "## Evidence"]
    lines += [
        f"- {e.at:%Y-%m-%d %H:%M} [{e.source}] {e.actor + ': ' if e.actor else ''}{e.summary} ({e.event_id})"
        for e in space.evidence
    ]
    if space.candidates:
        lines += ["", "## Task candidates"]
        lines += [
            f"- {c.task_id} {c.priority} {c.intent}: {c.title}" + (f" -> run {c.run_id}" if c.run_id else "")
            for c in space.candidates
        ]
    if space.changes:
        lines += ["", "## Changes"]
        lines += [f"- {c.at:%Y-%m-%d %H:%M} {c.kind}: {c.detail}" for c in space.changes]
    return "\n".join(lines) + "\n"


def parse_space(text: str, where: str) -> ContextSpace:
    if not text.startswith("---\n"):
        raise SpaceFileError(where, "no front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise SpaceFileError(where, "the front matter is not closed by a '---' line")
    try:
        data = yaml.load(text[4 : end + 1], Loader=_Loader)  # a safe loader (C or Python)
    except yaml.YAMLError as exc:
        raise SpaceFileError(where, f"front matter is not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpaceFileError(where, "the front matter is not a mapping")
    try:
        return ContextSpace.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors()[:5])
        raise SpaceFileError(where, problems) from None
