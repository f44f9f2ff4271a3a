"""The `filter` of a sensor config, typed per source_type, and the test a fact must pass before routing.

`filter` is free-form in PERSONA.md; here it is parsed into one model per sensor type. A key the
model does not know is ignored, and `genworker check` warns about it by name (so a typo does not
pass unnoticed); a bad value stops the sensor (`degraded`). Upstream genworker's keys are read too,
list values also as one comma-separated string (as upstream writes them):

- workspace_file: `path` (folder, relative to the worker folder) or upstream's `watch_paths`
  (several folders), `include` (aliases `paths`, upstream's `patterns`) / `exclude` globs,
  `on_first_poll`, `push`, `max_files`
- git: `repo` (relative to the worker folder; upstream's `repo_path`; default the worker folder),
  `branches` (alias `branch`) globs (default: all), `paths` (only commits touching them), `tags`,
  `on_first_poll`, `max_commits`
- email: `folders` (aliases `mailbox`, upstream's `folder`), `security`, `from`, upstream's
  `from_domains`, `exclude_senders`, `subject_contains` (upstream's `subject_keywords`),
  `on_first_poll`, `max_messages`, `max_body_bytes`, `body_chars`
- webhook: `secret_env` (the NAME of the environment variable holding the HMAC secret)
- feishu_folder: `folder_path` (upstream's; this server has no Feishu folder sensor yet)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from genworker.autonomy.sensing.errors import SensorConfigError
from genworker.workspace.documents import Document, read_markdown
from genworker.workspace.errors import Issue
from genworker.workspace.models.base import CsvTuple, relative_path, thaw
from genworker.workspace.models.persona import SensorConfig, sensor_type
from genworker.workspace.snapshot import Worker

__all__ = [
    "EmailFilter",
    "FeishuFolderFilter",
    "FirstPoll",
    "GitFilter",
    "SensorFilter",
    "WebhookFilter",
    "WorkspaceFileFilter",
    "filter_issues",
    "glob_matches",
    "parse_filter",
    "unknown_filter_keys",
]

FirstPoll = Literal["baseline", "report"]
"""baseline: the first poll (no cursor yet) only records what exists; report: it reports it all."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class _Filter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    def passes(self, fields: Mapping[str, Any]) -> bool:
        return True


def glob_matches(path: str, pattern: str) -> bool:
    """fnmatch on the whole relative path (`*` also crosses `/`); a pattern without `/` also
    matches the file name alone, so `*.md` matches `notes/a.md`."""
    if fnmatch.fnmatchcase(path, pattern):
        return True
    return "/" not in pattern and fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)


def _folder(value: str) -> str:
    return "." if value in ("", ".", "./") else relative_path(value.rstrip("/"))


class WorkspaceFileFilter(_Filter):
    path: str = "."
    watch_paths: CsvTuple = ()  # upstream's: several folders (each relative to the worker folder); wins over path
    include: CsvTuple = Field(default=(), validation_alias=AliasChoices("include", "paths", "patterns"))  # empty: all
    exclude: CsvTuple = ()
    on_first_poll: FirstPoll = "baseline"
    push: bool = False  # also watch the folder with watchfiles and poll right after a change
    max_files: int = Field(default=20_000, ge=1)

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return _folder(value)

    @field_validator("watch_paths")
    @classmethod
    def _relative_all(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_folder(v) for v in value))

    @property
    def folders(self) -> tuple[str, ...]:
        return self.watch_paths or (self.path,)

    def passes(self, fields: Mapping[str, Any]) -> bool:
        path = fields.get("path")
        if not isinstance(path, str):
            return True
        if self.include and not any(glob_matches(path, g) for g in self.include):
            return False
        return not any(glob_matches(path, g) for g in self.exclude)


class GitFilter(_Filter):
    repo: str = Field(default=".", validation_alias=AliasChoices("repo", "repo_path"))  # ".": the worker folder
    branches: CsvTuple = Field(default=(), validation_alias=AliasChoices("branches", "branch"))  # globs; empty: all
    paths: CsvTuple = ()  # git glob pathspecs: only commits touching them are reported
    tags: bool = True
    on_first_poll: FirstPoll = "baseline"
    max_commits: int = Field(default=100, ge=1, le=10_000)  # per branch and poll; the newest are kept

    @field_validator("repo")
    @classmethod
    def _relative(cls, value: str) -> str:
        return _folder(value)

    def branch_allowed(self, branch: str) -> bool:
        return not self.branches or any(fnmatch.fnmatchcase(branch, g) for g in self.branches)

    def passes(self, fields: Mapping[str, Any]) -> bool:
        branch = fields.get("branch")
        if isinstance(branch, str) and not self.branch_allowed(branch):
            return False
        return self.tags or "tag" not in fields


class EmailFilter(_Filter):
    folders: CsvTuple = Field(
        default=("INBOX",), validation_alias=AliasChoices("folders", "mailbox", "folder"), min_length=1
    )
    security: Literal["ssl", "starttls", "plain"] | None = None  # default: ssl on port 993, else starttls
    from_: CsvTuple = Field(default=(), validation_alias=AliasChoices("from", "from_"))  # substrings of From
    from_domains: CsvTuple = ()  # upstream's: the sender's address ends with @domain or .domain
    exclude_senders: CsvTuple = ()  # globs on the sender's address, e.g. noreply@*
    subject_contains: CsvTuple = Field(  # case-insensitive substrings of the Subject
        default=(), validation_alias=AliasChoices("subject_contains", "subject_keywords")
    )
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
        if self.from_domains and not _in_domains(sender, self.from_domains):
            return False
        if isinstance(sender, str) and any(fnmatch.fnmatchcase(sender, g.casefold()) for g in self.exclude_senders):
            return False
        return not self.subject_contains or _contains_any(fields.get("subject"), self.subject_contains)


class WebhookFilter(_Filter):
    secret_env: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_inline_secret(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "secret" in data:  # never ignored: the sender expects it checked
            raise ValueError("inline secrets are refused: put it in an environment variable named by secret_env")
        return data

    @field_validator("secret_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("secret_env must name an environment variable (letters, digits, '_')")
        return value


class FeishuFolderFilter(_Filter):
    folder_path: str = "/"


SensorFilter = WorkspaceFileFilter | GitFilter | EmailFilter | WebhookFilter | FeishuFolderFilter

_MODELS: Mapping[str, type[_Filter]] = {
    "workspace_file": WorkspaceFileFilter,
    "git": GitFilter,
    "email": EmailFilter,
    "webhook": WebhookFilter,
    "feishu_folder": FeishuFolderFilter,
}


def unknown_filter_keys(config: SensorConfig) -> list[str]:
    """Keys of `config.filter` its sensor type does not read (ignored)."""
    model = _MODELS.get(config.source_type)
    if model is None:
        return []
    known: set[str] = set()
    for name, field in model.model_fields.items():
        known.add(name)
        if isinstance(field.validation_alias, AliasChoices):
            known.update(c for c in field.validation_alias.choices if isinstance(c, str))
    return [key for key in config.filter if key not in known]


def parse_filter(config: SensorConfig) -> SensorFilter:
    """The typed filter of `config`; SensorConfigError naming the sensor and field when it is invalid."""
    model = _MODELS.get(config.source_type)
    if model is None:
        raise SensorConfigError(f"sensor {config.key!r}: unknown source_type {config.source_type!r}")
    try:
        parsed = model.model_validate(thaw(config.filter))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "filter"
        raise SensorConfigError(
            f"sensor {config.key!r} ({config.source_type}): filter.{where}: {first.get('msg', 'invalid')}"
        ) from None
    assert isinstance(parsed, WorkspaceFileFilter | GitFilter | EmailFilter | WebhookFilter | FeishuFolderFilter)
    return parsed


def filter_issues(workspace: Path, worker: Worker) -> list[Issue]:
    """A warning per sensor of `worker` whose filter does not parse (the runtime would start it
    `degraded` and never poll it) and per filter key its type does not read (ignored). For
    `genworker check`; a filter's meaning (does the repo exist, are there credentials) is the
    runtime's to report, an unknown source_type the loader's."""
    issues: list[Issue] = []
    rel = worker.files["persona"]
    doc: Document | None = None
    for config in worker.persona.sensor_configs:
        if config.source_type not in _MODELS:
            continue
        problems: list[tuple[str, str]] = [
            (key, "ignored: this sensor type does not read it") for key in unknown_filter_keys(config)
        ]
        try:
            parse_filter(config)
        except SensorConfigError as exc:
            problems.append(("", f"{exc} (this sensor will not run)"))
        if not problems:
            continue
        if doc is None:
            doc = read_markdown(workspace / rel, rel)
        key, index = _entry(doc, config)
        for name, message in problems:
            loc: list[str | int] = [key, index, "filter", *([name] if name else [])]
            line = doc.line_of(loc) or doc.line_of([key, index])
            field = f"{key}[{index}].filter" + (f".{name}" if name else "")
            issues.append(Issue("warning", rel, message, field, line))
    return issues


def _entry(doc: Document, config: SensorConfig) -> tuple[str, int]:
    """Where `config` is written in PERSONA.md (an earlier sensor of its type may have been replaced)."""
    key = "sensor_configs" if "sensor_configs" in doc.data else "monitor_configs"
    written = doc.data.get(key)
    found = 0
    for i, item in enumerate(written if isinstance(written, list) else []):
        if isinstance(item, Mapping) and (item.get("sensor_id") or sensor_type(item.get("source_type"))) == config.key:
            found = i  # the last one: a later sensor of one type replaces an earlier one
    return key, found


def _in_domains(sender: Any, domains: tuple[str, ...]) -> bool:
    if not isinstance(sender, str):
        return False
    address = sender.casefold()
    return any(address.endswith((f"@{d.casefold().lstrip('@')}", f".{d.casefold().lstrip('@')}")) for d in domains)


def _contains_any(value: Any, needles: tuple[str, ...]) -> bool:
    if not isinstance(value, str):
        return False
    folded = value.casefold()
    return any(n.casefold() in folded for n in needles)
