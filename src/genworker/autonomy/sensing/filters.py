"""The `filter` of a sensor config, typed per source_type, and the test a fact must pass before routing.

`filter` is free-form in PERSONA.md; here it is parsed (unknown keys are errors, so a typo does not
silently widen a sensor) into one model per sensor type:

- workspace_file: `path` (folder, relative to the worker folder), `include` (alias `paths`) /
  `exclude` globs, `on_first_poll`, `push`, `max_files`
- git: `repo` (relative to the worker folder), `branches` (alias `branch`) globs, `paths` (only
  commits touching them), `tags`, `on_first_poll`, `max_commits`
- email: `folders` (alias `mailbox`), `security`, `from`, `exclude_senders`, `subject_contains`,
  `on_first_poll`, `max_messages`, `max_body_bytes`, `body_chars`
- webhook: `secret_env` (the NAME of the environment variable holding the HMAC secret)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from genworker.autonomy.sensing.errors import SensorConfigError
from genworker.workspace.documents import Document, read_markdown
from genworker.workspace.errors import Issue
from genworker.workspace.models.base import StrTuple, relative_path, thaw
from genworker.workspace.models.persona import SensorConfig
from genworker.workspace.snapshot import Worker

__all__ = [
    "EmailFilter",
    "FirstPoll",
    "GitFilter",
    "SensorFilter",
    "WebhookFilter",
    "WorkspaceFileFilter",
    "filter_issues",
    "glob_matches",
    "parse_filter",
]

FirstPoll = Literal["baseline", "report"]
"""baseline: the first poll (no cursor yet) only records what exists; report: it reports it all."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class _Filter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def passes(self, fields: Mapping[str, Any]) -> bool:
        return True


def glob_matches(path: str, pattern: str) -> bool:
    """fnmatch on the whole relative path (`*` also crosses `/`); a pattern without `/` also
    matches the file name alone, so `*.md` matches `notes/a.md`."""
    if fnmatch.fnmatchcase(path, pattern):
        return True
    return "/" not in pattern and fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)


class WorkspaceFileFilter(_Filter):
    path: str = "."
    include: StrTuple = Field(default=(), validation_alias=AliasChoices("include", "paths"))  # empty: all
    exclude: StrTuple = ()
    on_first_poll: FirstPoll = "baseline"
    push: bool = False  # also watch the folder with watchfiles and poll right after a change
    max_files: int = Field(default=20_000, ge=1)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return "." if value in ("", ".", "./") else relative_path(value.rstrip("/"))

    def passes(self, fields: Mapping[str, Any]) -> bool:
        path = fields.get("path")
        if not isinstance(path, str):
            return True
        if self.include and not any(glob_matches(path, g) for g in self.include):
            return False
        return not any(glob_matches(path, g) for g in self.exclude)


class GitFilter(_Filter):
    repo: str
    branches: StrTuple = Field(default=(), validation_alias=AliasChoices("branches", "branch"))  # globs; empty: all
    paths: StrTuple = ()  # git glob pathspecs: only commits touching them are reported
    tags: bool = True
    on_first_poll: FirstPoll = "baseline"
    max_commits: int = Field(default=100, ge=1, le=10_000)  # per branch and poll; the newest are kept

    @field_validator("repo")
    @classmethod
    def _relative(cls, value: str) -> str:
        return relative_path(value.rstrip("/"))

    def branch_allowed(self, branch: str) -> bool:
        return not self.branches or any(fnmatch.fnmatchcase(branch, g) for g in self.branches)

    def passes(self, fields: Mapping[str, Any]) -> bool:
        branch = fields.get("branch")
        if isinstance(branch, str) and not self.branch_allowed(branch):
            return False
        return self.tags or "tag" not in fields


class EmailFilter(_Filter):
    folders: StrTuple = Field(default=("INBOX",), validation_alias=AliasChoices("folders", "mailbox"), min_length=1)
    security: Literal["ssl", "starttls", "plain"] | None = None  # default: ssl on port 993, else starttls
    from_: StrTuple = Field(default=(), validation_alias=AliasChoices("from", "from_"))  # substrings of From
    exclude_senders: StrTuple = ()  # globs on the sender's address, e.g. noreply@*
    subject_contains: StrTuple = ()  # case-insensitive substrings of the Subject
    on_first_poll: FirstPoll = "baseline"
    max_messages: int = Field(default=50, ge=1, le=1000)  # per poll; the rest next poll
    max_body_bytes: int = Field(default=262_144, ge=0)  # larger messages are reported without a body
    body_chars: int = Field(default=4000, ge=0)

    @field_validator("folders")
    @classmethod
    def _ascii(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not name.isascii() or any(c in name for c in '\r\n"\\'):
                raise ValueError("folder names must be non-empty ASCII without quotes, backslashes or newlines")
        if len(set(value)) != len(value):
            raise ValueError("a folder is named twice")
        return value

    def passes(self, fields: Mapping[str, Any]) -> bool:
        if self.from_ and not _contains_any(fields.get("from"), self.from_):
            return False
        sender = fields.get("sender")
        if isinstance(sender, str) and any(fnmatch.fnmatchcase(sender, g.casefold()) for g in self.exclude_senders):
            return False
        return not self.subject_contains or _contains_any(fields.get("subject"), self.subject_contains)


class WebhookFilter(_Filter):
    secret_env: str | None = None

    @field_validator("secret_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("secret_env must name an environment variable (letters, digits, '_')")
        return value


SensorFilter = WorkspaceFileFilter | GitFilter | EmailFilter | WebhookFilter

_MODELS: Mapping[str, type[_Filter]] = {
    "workspace_file": WorkspaceFileFilter,
    "git": GitFilter,
    "email": EmailFilter,
    "webhook": WebhookFilter,
}


def parse_filter(config: SensorConfig) -> SensorFilter:
    """The typed filter of `config`; SensorConfigError naming the sensor and field when it is invalid."""
    model = _MODELS[config.source_type]
    try:
        parsed = model.model_validate(thaw(config.filter))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "filter"
        raise SensorConfigError(
            f"sensor {config.key!r} ({config.source_type}): filter.{where}: {first.get('msg', 'invalid')}"
        ) from None
    assert isinstance(parsed, WorkspaceFileFilter | GitFilter | EmailFilter | WebhookFilter)
    return parsed


def filter_issues(workspace: Path, worker: Worker) -> list[Issue]:
    """A warning per sensor of `worker` whose filter does not parse: the runtime would start it
    `degraded` and never poll it. For `genworker check`; a filter's meaning (does the repo exist,
    are there credentials) is the runtime's to report."""
    issues: list[Issue] = []
    rel = worker.files["persona"]
    doc: Document | None = None
    for index, config in enumerate(worker.persona.sensor_configs):
        try:
            parse_filter(config)
        except SensorConfigError as exc:
            if doc is None:
                doc = read_markdown(workspace / rel, rel)
            key = "sensor_configs" if "sensor_configs" in doc.data else "monitor_configs"
            line = doc.line_of([key, index, "filter"]) or doc.line_of([key, index])
            issues.append(Issue("warning", rel, f"{exc} (this sensor will not run)", f"{key}[{index}].filter", line))
    return issues


def _contains_any(value: Any, needles: tuple[str, ...]) -> bool:
    if not isinstance(value, str):
        return False
    folded = value.casefold()
    return any(n.casefold() in folded for n in needles)
