"""Reading workspace files and validating them into models, with errors that point home.

A `Document` is one parsed file (front matter or JSON) plus what is needed to turn a
pydantic error location into `file:line: field.path: reason`. Line lookup composes the
YAML again only when there is something to report, so the clean path parses once.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from frontmatter.default_handlers import YAMLHandler
from pydantic import AliasChoices, BaseModel, ValidationError

from genworker.workspace import inputs
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.limits import SizeLimit, describe_size
from genworker.workspace.models.base import NoteKind, Recorder, recording

__all__ = ["Document", "explaining", "explaining_active", "read_json", "read_markdown", "read_text", "validate"]

M = TypeVar("M", bound=BaseModel)
_YAML = YAMLHandler()
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class Document:
    rel: str
    data: Mapping[str, Any]
    body: str
    source: str  # the YAML or JSON text the data came from
    line_offset: int  # lines before `source` starts in the file

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        try:
            node = yaml.compose(self.source, Loader=_SafeLoader)
        except yaml.YAMLError:
            return None
        line = None if node is None else node.start_mark.line
        for part in loc:
            child = _child(node, part)
            if child is None:
                continue
            node, line = child, child.start_mark.line
        return None if line is None else line + 1 + self.line_offset


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                found: yaml.Node = value
                return found
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item: yaml.Node = node.value[part]
        return item
    return None


def read_markdown(
    path: Path, rel: str, *, limit: SizeLimit | None = None, require_front_matter: bool = True
) -> Document:
    """Front matter and body of a Markdown file; `limit` refuses a larger file before it is read."""
    text = read_text(path, rel, limit)
    stripped = text.lstrip()  # blank lines before the first '---' are fine (as upstream reads them)
    if not _YAML.detect(stripped):
        if require_front_matter:
            raise WorkspaceError.single(rel, "missing YAML front matter (a '---' block at the top)")
        return Document(rel, {}, text.strip(), "", 0)
    leading = text.count("\n", 0, len(text) - len(stripped))
    text = stripped
    boundary = _YAML.FM_BOUNDARY.match(text)
    # lines before the YAML source; the boundary pattern may swallow blank lines after '---'
    offset = leading + (0 if boundary is None else text.count("\n", 0, boundary.end()))
    try:
        source, body = _YAML.split(text)
    except ValueError:
        raise WorkspaceError.single(rel, "front matter is not closed: end it with a '---' line", line=1) from None
    try:
        data = yaml.load(source, Loader=_SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(rel, exc, source, offset) from exc
    except yaml.YAMLError as exc:
        raise WorkspaceError.single(rel, f"invalid front matter: {exc}") from exc
    except RecursionError:
        raise WorkspaceError.single(rel, "front matter is nested too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WorkspaceError.single(rel, f"front matter must be a mapping, got {type(data).__name__}")
    try:
        cyclic = "&" in source and _has_cycle(data, set(), set())  # only YAML anchors can make cycles
    except RecursionError:
        cyclic = True
    if cyclic:
        raise WorkspaceError.single(rel, "front matter is recursive or nested too deeply (YAML anchors)")
    return Document(rel, data, body.strip(), source, offset)


def _has_cycle(value: Any, path: set[int], done: set[int]) -> bool:
    """True when YAML aliases made `value` contain itself (validation would never end)."""
    if not isinstance(value, dict | list) or id(value) in done:
        return False
    if id(value) in path:
        return True
    path.add(id(value))
    children = value.values() if isinstance(value, dict) else value
    found = any(_has_cycle(child, path, done) for child in children)
    path.discard(id(value))
    done.add(id(value))
    return found


def _yaml_error(rel: str, exc: yaml.MarkedYAMLError, source: str, offset: int) -> WorkspaceError:
    """Point at the line to fix, not where YAML noticed: a key without its ':' is noticed on the
    next line, an unclosed quote or bracket at the end of the front matter."""
    problem, context = exc.problem_mark, exc.context_mark
    mark = problem or context
    at = None if mark is None else mark.line  # 0-based, in `source`
    note = ""
    if problem is not None and context is not None:
        if problem.line >= source.count("\n") or exc.context == "while scanning a simple key":
            at = context.line
    elif problem is not None and "mapping values are not allowed" in str(exc.problem):
        folded = _folded_scalar_line(source)
        if folded is not None and folded < problem.line:
            at, note = folded, f"; this line has no ':' and runs on into line {problem.line + 1 + offset}"
    message = f"invalid YAML: {exc.problem or exc}{note}"
    if exc.context and context is not None and context.line != at:
        message += f" ({exc.context} at line {context.line + 1 + offset})"
    elif exc.context:
        message += f" ({exc.context})"
    return WorkspaceError.single(rel, message, line=None if at is None else at + 1 + offset)


def _folded_scalar_line(source: str) -> int | None:
    """Where the plain scalar that ran into a misplaced ':' starts, unless it is a mapping value
    (a value may go on over several lines; a bare line cannot)."""
    previous = last = None
    try:
        for token in yaml.scan(source, Loader=_SafeLoader):
            previous, last = last, token
    except yaml.YAMLError:
        pass
    if isinstance(last, yaml.ScalarToken) and not isinstance(previous, yaml.ValueToken):
        line: int = last.start_mark.line
        return line
    return None


def read_json(path: Path, rel: str, *, limit: SizeLimit | None = None) -> Document:
    text = read_text(path, rel, limit)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkspaceError.single(rel, f"invalid JSON: {exc.msg}", line=exc.lineno) from exc
    if not isinstance(data, dict):
        raise WorkspaceError.single(rel, f"must be a JSON object, got {type(data).__name__}")
    return Document(rel, data, "", text, 0)


def read_text(path: Path, rel: str, limit: SizeLimit | None = None) -> str:
    """The UTF-8 text of a regular file; its size is checked against `limit` before reading."""
    try:
        info = inputs.stat(path)  # recorded for the load cache, before the read
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError.single(rel, "cannot read: not a regular file")
        if limit is not None and info.st_size > limit.max_bytes:
            raise _too_large(rel, info.st_size, limit)
        with path.open("rb") as fh:
            data = fh.read(-1 if limit is None else limit.max_bytes + 1)
            if limit is not None and len(data) > limit.max_bytes:  # it grew after the stat
                raise _too_large(rel, max(len(data), os.fstat(fh.fileno()).st_size), limit)
    except OSError as exc:
        raise WorkspaceError.single(rel, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8-sig")  # a BOM (Windows editors) is not content
    except UnicodeDecodeError as exc:
        raise _not_utf8(rel, exc) from None


def _too_large(rel: str, size: int, limit: SizeLimit) -> WorkspaceError:
    return WorkspaceError.single(
        rel,
        f"file is {describe_size(size)}, over the {describe_size(limit.max_bytes)} limit for {limit.label} "
        f"files ({limit.setting} sets it); not loaded",
    )


def _not_utf8(rel: str, exc: UnicodeDecodeError) -> WorkspaceError:
    """Line and column (in characters) of the first byte that is not UTF-8."""
    data: bytes = exc.object  # without a leading BOM: offsets count from after it
    start = data.rfind(b"\n", 0, exc.start) + 1
    line = data.count(b"\n", 0, exc.start) + 1
    column = len(data[start : exc.start].decode("utf-8")) + 1
    message = f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column} ({exc.reason})"
    return WorkspaceError.single(rel, message, line=line)


def validate(model: type[M], doc: Document, data: Mapping[str, Any] | None = None) -> tuple[M, list[Issue]]:
    """Validate `data` (default: the document's) into `model`.

    Returns the model, warnings for unknown fields and compatibility notes (severity "note":
    how an upstream spelling was read). Raises WorkspaceError with one issue per invalid
    field, plus the warnings for unknown fields of the same file.
    """
    raw = doc.data if data is None else data
    with recording() as recorder:
        try:
            obj = model.model_validate(raw)
        except ValidationError as exc:
            unknown = [
                Issue("warning", doc.rel, "unknown field (ignored)", _dotted(loc), doc.line_of(loc))
                for loc in _raw_unknown(model, raw, ())
            ]
            raise WorkspaceError([*_issues(doc, raw, exc), *unknown]) from None
    issues = [
        Issue("warning", doc.rel, "unknown field (ignored)", field, doc.line_of(loc))
        for field, loc in unknown_fields(obj, raw=raw)
    ]
    issues.extend(_notes(doc, obj, raw, recorder))
    if _EXPLAINING.get():
        issues.extend(_understood(doc, model, raw))
    return obj, issues


@contextmanager
def explaining() -> Iterator[None]:
    """While active, `validate()` also notes every top-level field it understood
    (for `genworker check --explain`)."""
    token = _EXPLAINING.set(True)
    try:
        yield
    finally:
        _EXPLAINING.reset(token)


_EXPLAINING: ContextVar[bool] = ContextVar("genworker_explaining", default=False)


def explaining_active() -> bool:
    return _EXPLAINING.get()


def _notes(doc: Document, obj: BaseModel, raw: Any, recorder: Recorder) -> Iterator[Issue]:
    """The recorder's notes, placed at the path and line of the model that made them."""
    pending = dict(recorder.by_model)
    for model, loc, model_raw in _models(obj, (), raw):
        found = pending.pop(id(model), None)
        if found is not None:
            for field, kind, detail in found[1]:
                yield _note_issue(doc, _field_loc(type(model), model_raw, loc, field), kind, detail)
    for _, notes in pending.values():  # made by a model the walk cannot reach (inside a plain map)
        for field, kind, detail in notes:
            yield _note_issue(doc, _field_loc(BaseModel, None, (), field), kind, detail)


def _note_issue(doc: Document, loc: tuple[str | int, ...], kind: NoteKind, detail: str) -> Issue:
    if kind == "warning":
        return Issue("warning", doc.rel, detail, _dotted(loc), doc.line_of(loc))
    return Issue("note", doc.rel, f"{kind}: {detail}", _dotted(loc), doc.line_of(loc))


def _field_loc(cls: type[BaseModel], raw: Any, loc: tuple[str | int, ...], field: str) -> tuple[str | int, ...]:
    if not field:
        return loc
    first, *rest = field.split(".")
    spellings = _spellings(cls).get(first)
    key = _key_in(raw, spellings) if spellings else first
    return (*loc, key, *(int(part) if part.isdigit() else part for part in rest))  # "contacts.0" -> [0]


def _understood(doc: Document, model: type[BaseModel], raw: Mapping[str, Any]) -> list[Issue]:
    known = _known_keys(model)
    keys = [k for k in (doc.data if isinstance(doc.data, Mapping) else raw) if k in known]
    return [Issue("note", doc.rel, "understood: " + ", ".join(map(str, keys)))] if keys else []


def _issues(doc: Document, raw: Mapping[str, Any], exc: ValidationError) -> list[Issue]:
    issues = []
    for err in exc.errors(include_url=False):
        missing = err["type"] == "missing"
        loc = _data_loc(raw, err["loc"], keep_missing_key=missing)
        message = "field required" if missing else err["msg"]
        issues.append(Issue("error", doc.rel, message, _dotted(loc), doc.line_of(loc)))
    return issues


def _data_loc(raw: Any, loc: Sequence[str | int], *, keep_missing_key: bool) -> list[str | int]:
    """Drop the parts of a pydantic error location that are not in the data (union tags)."""
    out: list[str | int] = []
    node = raw
    for i, part in enumerate(loc):
        present = (isinstance(node, Mapping) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        )
        if present:
            node = node[part]
        elif keep_missing_key and i == len(loc) - 1 and isinstance(node, Mapping):
            pass  # a missing key: keep it so the message names it
        else:
            continue
        out.append(part)
    return out


def _dotted(loc: Sequence[str | int]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def unknown_fields(
    obj: BaseModel, loc: tuple[str | int, ...] = (), raw: Any = None
) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """Yield (dotted path, loc) of every extra key kept on `obj` and its sub-models.

    `raw` (the data `obj` came from) names aliased fields the way the file spells them.
    """
    for model, model_loc, _ in _models(obj, loc, raw):
        if not getattr(type(model), "open_extras", False):
            for key in model.model_extra or {}:
                yield _dotted((*model_loc, key)), (*model_loc, key)


def _models(
    obj: BaseModel, loc: tuple[str | int, ...], raw: Any
) -> Iterator[tuple[BaseModel, tuple[str | int, ...], Any]]:
    """`obj` and every sub-model of the fields it was given, with their location in the file."""
    yield obj, loc, raw
    spellings = _spellings(type(obj))
    for name in obj.model_fields_set & spellings.keys():  # defaults carry no extras
        value = getattr(obj, name)
        if not isinstance(value, BaseModel | tuple | Mapping):
            continue
        key = _key_in(raw, spellings[name])
        sub = raw.get(key) if isinstance(raw, Mapping) else None
        if isinstance(value, BaseModel):
            yield from _models(value, (*loc, key), sub)
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    item_raw = sub[i] if isinstance(sub, list) and i < len(sub) else None
                    yield from _models(item, (*loc, key, i), item_raw)
        else:
            for item_key, item in value.items():
                if isinstance(item, BaseModel):
                    item_raw = sub.get(item_key) if isinstance(sub, Mapping) else None
                    yield from _models(item, (*loc, key, item_key), item_raw)


def _raw_unknown(cls: type[BaseModel], raw: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    """Unknown keys found in the raw data of a file that failed validation (no model to ask)."""
    if not isinstance(raw, Mapping):
        return
    if not getattr(cls, "open_extras", False):
        known = _known_keys(cls)
        for key in raw:
            if key not in known:
                yield (*loc, key)
    for name, spelled in _spellings(cls).items():
        key = _key_in(raw, spelled)
        if key not in raw:
            continue
        sub_cls = _sub_model(cls.model_fields[name].annotation)
        if sub_cls is None:
            continue
        value = raw[key]
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _raw_unknown(sub_cls, item, (*loc, key, i))
        else:
            yield from _raw_unknown(sub_cls, value, (*loc, key))


def _sub_model(annotation: Any) -> type[BaseModel] | None:
    """The one model class a field holds (`X`, `X | None`, `tuple[X, ...]`, `list[X]`), if any."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if len(args) == 1 and get_origin(annotation) in (Union, UnionType, tuple, list):
        return _sub_model(args[0])
    return None


@functools.cache
def _known_keys(cls: type[BaseModel]) -> frozenset[str]:
    names = {n for spelled in _spellings(cls).values() for n in spelled}
    return frozenset(names | set(getattr(cls, "compat_keys", ())))


@functools.cache
def _spellings(cls: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """Field name -> the keys a file may spell it with (alias first, then alias choices)."""
    out: dict[str, tuple[str, ...]] = {}
    for name, field in cls.model_fields.items():
        names = [field.alias or name]
        if isinstance(field.validation_alias, AliasChoices):
            names += [c for c in field.validation_alias.choices if isinstance(c, str)]
        out[name] = tuple(dict.fromkeys(names))
    return out


def _key_in(raw: Any, names: tuple[str, ...]) -> str:
    if isinstance(raw, Mapping):
        for candidate in names:
            if candidate in raw:
                return candidate
    return names[0]
