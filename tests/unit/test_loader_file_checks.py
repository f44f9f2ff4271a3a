"""What the loader says about a file before and while parsing it, for every kind of file it reads:
size limits (checked with stat, before the read), bytes that are not UTF-8, and the line of a
YAML error in front matter."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from genworker.settings import SettingsError, load_settings
from genworker.workspace.errors import Issue
from genworker.workspace.limits import DEFAULT_LIMITS, KIB, FileLimits
from genworker.workspace.registry import WorkspaceRegistry

W = "tenants/acme/workers/w"


@dataclass(frozen=True)
class Kind:
    """One kind of workspace file: where it lives, valid front matter lines and a body."""

    name: str
    rel: str
    front: tuple[str, ...]
    body: str = "Text."
    limit: str = ""

    def text(self, front: tuple[str, ...] | None = None, body: str | None = None) -> str:
        lines = "\n".join(self.front if front is None else front)
        return f"---\n{lines}\n---\n{self.body if body is None else body}\n"


PERSONA = ("identity:", "  name: W", "  worker_id: w", "  role: helper", "mode: personal")
MARKDOWN = [
    Kind("PERSONA.md", f"{W}/PERSONA.md", PERSONA, "Be helpful.", "persona"),
    Kind("duty", f"{W}/duties/d.md", ("duty_id: d", "title: D", "status: active", "skill_hint: s"), "Do it.", "duty"),
    Kind("duty defaults", f"{W}/duties/_defaults.md", ("execution_log_retention: 30d", "quality_criteria: [short]"),
         "Defaults.", "duty"),
    Kind("goal", f"{W}/goals/g.md", ("goal_id: g", "title: G", "priority: high"), "Why.", "goal"),
    Kind("worker skill", f"{W}/skills/s/SKILL.md", ("name: s", "description: The s skill.", "version: '1'"),
         "Use it.", "skill"),
    Kind("tenant skill", "tenants/acme/skills/t/SKILL.md", ("name: t", "description: The t skill.", "version: '1'"),
         "Use it.", "skill"),
    Kind("system skill", "system/skills/y/SKILL.md", ("name: y", "description: The y skill.", "version: '1'"),
         "Use it.", "skill"),
    Kind("rule", f"{W}/rules/directives/r.md", ("title: R", "priority: 5", "source: Dana"), "Be brief.", "rule"),
    Kind("contact", f"{W}/contacts/configured/c.md", ("person_id: c", "name: C", "role: Peer"), "Notes.", "contact"),
]  # fmt: skip
JSON = [
    Kind("TENANT.json", "tenants/acme/TENANT.json", (), '{\n  "tenant_id": "acme",\n  "name": "Acme"\n}', "tenant"),
    Kind("CHANNEL_CREDENTIALS.json", f"{W}/CHANNEL_CREDENTIALS.json", (),
         '{\n  "slack": {\n    "bot_token": "xoxb-1", "signing_secret": "s"\n  }\n}', "credentials"),
    Kind("contacts index", f"{W}/contacts/index.jsonl", (), '{"person_id": "a"}\n{"person_id": "b"}', "contact_index"),
]  # fmt: skip
EVERY = MARKDOWN + JSON


def ids(kinds: list[Kind]) -> list[str]:
    return [k.name for k in kinds]


def write(root: Path, rel: str, data: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def workspace(root: Path, *, persona: bool = True) -> Path:
    """A tenant with one valid worker, w, that has a skill `s` (the duty's skill_hint)."""
    write(root, "tenants/acme/TENANT.json", '{"tenant_id": "acme"}')
    if persona:
        write(root, f"{W}/PERSONA.md", MARKDOWN[0].text())
    write(root, f"{W}/skills/s/SKILL.md", MARKDOWN[4].text())
    return root


def place(root: Path, kind: Kind, data: str | bytes) -> None:
    workspace(root, persona=kind.name != "PERSONA.md")
    write(root, kind.rel, data)


def errors_for(registry: WorkspaceRegistry, rel: str) -> list[Issue]:
    return [i for i in registry.issues() if i.severity == "error" and i.file == rel]


def load(root: Path, limits: FileLimits = DEFAULT_LIMITS) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(root, product_skills=None, limits=limits)
    registry.load_all()
    return registry


def tiny(kind: Kind, max_bytes: int) -> FileLimits:
    """The default limits with the one for `kind` lowered to `max_bytes`."""
    limit = getattr(DEFAULT_LIMITS, kind.limit)
    return replace(DEFAULT_LIMITS, **{kind.limit: replace(limit, max_bytes=max_bytes)})


def valid_text(kind: Kind) -> str:
    return kind.body if kind in JSON else kind.text()


# -- size limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", EVERY, ids=ids(EVERY))
def test_every_kind_of_file_over_its_limit_is_refused_naming_file_size_and_limit(tmp_path: Path, kind: Kind) -> None:
    text = valid_text(kind)
    place(tmp_path, kind, text)
    size = len(text.encode())
    assert errors_for(load(tmp_path, tiny(kind, size)), kind.rel) == []  # at the limit: fine
    (issue,) = errors_for(load(tmp_path, tiny(kind, size - 1)), kind.rel)
    limit = getattr(DEFAULT_LIMITS, kind.limit)
    assert issue.message == (
        f"file is {size} bytes, over the {size - 1} bytes limit for {limit.label} files "
        f"({limit.setting} sets it); not loaded"
    )


def test_a_40_mib_persona_is_refused_from_its_size_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace(tmp_path)
    persona = tmp_path / W / "PERSONA.md"
    with persona.open("r+b") as fh:
        fh.truncate(40 * KIB * KIB)  # sparse: nothing to read but zeros, and the loader must not try
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *args: object, **kwargs: object) -> object:
        opened.append(self.name)
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", spy)
    registry = load(tmp_path)
    assert "PERSONA.md" not in opened
    (issue,) = errors_for(registry, f"{W}/PERSONA.md")
    assert issue.message.startswith("file is 40 MiB, over the 256 KiB limit for PERSONA.md files")
    assert registry.worker("acme", "w") is None


def test_the_default_persona_limit_is_256_kib(tmp_path: Path) -> None:
    workspace(tmp_path)
    body = "x" * (256 * KIB - len(MARKDOWN[0].text(body="").encode()))
    write(tmp_path, f"{W}/PERSONA.md", MARKDOWN[0].text(body=body))
    assert (tmp_path / W / "PERSONA.md").stat().st_size == 256 * KIB
    assert load(tmp_path).worker("acme", "w") is not None
    write(tmp_path, f"{W}/PERSONA.md", MARKDOWN[0].text(body=body + "x"))
    (issue,) = errors_for(load(tmp_path), f"{W}/PERSONA.md")
    assert "256.0 KiB" in issue.message and "over the 256 KiB limit" in issue.message


def test_a_reload_refuses_an_oversized_file_and_the_last_good_version_keeps_serving(tmp_path: Path) -> None:
    workspace(tmp_path)
    registry = WorkspaceRegistry(tmp_path, product_skills=None, limits=tiny(MARKDOWN[0], 4 * KIB))
    registry.load_all()
    good = registry.worker("acme", "w")
    assert good is not None
    write(tmp_path, f"{W}/PERSONA.md", MARKDOWN[0].text(body="x" * 5 * KIB))
    outcome = registry.reload_worker("acme", "w")
    assert (outcome.ok, outcome.kept_last_good) == (False, True)
    (issue,) = outcome.errors
    assert issue.file == f"{W}/PERSONA.md" and "over the 4 KiB limit for PERSONA.md files" in issue.message
    assert registry.worker("acme", "w") is good
    assert issue in registry.issues()

    write(tmp_path, "tenants/acme/TENANT.json", '{"tenant_id": "acme", "name": "' + "A" * 70 * KIB + '"}')
    outcome = registry.reload_tenant("acme")
    assert (outcome.ok, outcome.kept_last_good) == (False, True)
    assert "over the 64 KiB limit for TENANT.json files" in outcome.errors[0].message
    assert registry.worker("acme", "w") is good


def test_limits_come_from_settings_in_kib(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, {"GENWORKER_MAX_PERSONA_KIB": "2", "GENWORKER_MAX_SKILL_KIB": "1.5"})
    limits = FileLimits.from_settings(settings)
    assert (limits.persona.max_bytes, limits.skill.max_bytes) == (2 * KIB, 1536)
    assert limits.duty == DEFAULT_LIMITS.duty
    registry = WorkspaceRegistry.from_settings(replace(settings, workspace=workspace(tmp_path / "ws")))
    assert registry.limits == limits
    with pytest.raises(SettingsError, match="GENWORKER_MAX_RULE_KIB='0': must be between 1 and 65536"):
        FileLimits.from_settings(load_settings(tmp_path, {"GENWORKER_MAX_RULE_KIB": "0"}))


# -- not UTF-8 -------------------------------------------------------------------------------------


def with_bad_byte(text: str, line: int, column: int) -> bytes:
    """`text` with byte 0xff inserted before character `column` of `line` (both 1-based)."""
    lines = text.encode().split(b"\n")
    row = lines[line - 1].decode()
    lines[line - 1] = row[: column - 1].encode() + b"\xff" + row[column - 1 :].encode()
    return b"\n".join(lines)


@pytest.mark.parametrize("kind", EVERY, ids=ids(EVERY))
def test_bytes_that_are_not_utf8_are_reported_at_their_line_and_column(tmp_path: Path, kind: Kind) -> None:
    text = valid_text(kind)
    line = 2
    place(tmp_path, kind, with_bad_byte(text, line, 3))
    (issue,) = errors_for(load(tmp_path), kind.rel)
    assert issue.line == line
    assert issue.message == f"not UTF-8 text: byte 0xff at line {line}, column 3 (invalid start byte)"


@pytest.mark.parametrize(
    ("line", "column"),
    [(1, 1), (3, 10), (7, 1), (8, 5)],
    ids=["opening ---", "front matter", "first body line", "last body line"],
)
def test_not_utf8_in_front_matter_or_body_names_its_line(tmp_path: Path, line: int, column: int) -> None:
    kind = MARKDOWN[0]
    text = kind.text(body="# Iris\nBe brief, été comme hiver.")  # column counts characters, not bytes
    place(tmp_path, kind, with_bad_byte(text, line, column))
    (issue,) = errors_for(load(tmp_path), kind.rel)
    assert issue.line == line
    assert f"byte 0xff at line {line}, column {column} (" in issue.message


def test_not_utf8_after_a_byte_order_mark_counts_from_the_first_line(tmp_path: Path) -> None:
    kind = MARKDOWN[0]
    place(tmp_path, kind, b"\xef\xbb\xbf" + with_bad_byte(kind.text(), 4, 3))
    (issue,) = errors_for(load(tmp_path), kind.rel)
    assert (issue.line, issue.message) == (4, "not UTF-8 text: byte 0xff at line 4, column 3 (invalid start byte)")


# -- YAML errors: the line to fix -----------------------------------------------------------------

NO_COLON = "this line has no colon"
UNCLOSED = 'quote: "never closed'


@pytest.mark.parametrize("kind", MARKDOWN, ids=ids(MARKDOWN))
@pytest.mark.parametrize("bad", [NO_COLON, UNCLOSED], ids=["key without ':'", "unclosed quote"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_yaml_error_names_the_line_it_is_on(tmp_path: Path, kind: Kind, bad: str, where: str) -> None:
    top_level = [i for i, line in enumerate(kind.front) if i and not line.startswith(" ")]
    index = {"first": 0, "middle": top_level[len(top_level) // 2], "last": len(kind.front)}[where]
    front = (*kind.front[:index], bad, *kind.front[index:])
    place(tmp_path, kind, kind.text(front))
    (issue,) = errors_for(load(tmp_path), kind.rel)
    assert issue.message.startswith("invalid YAML: ")
    assert issue.line == index + 2, issue  # +1 for the opening '---', +1 as lines count from 1


def test_the_broken_persona_of_the_report_names_line_6(tmp_path: Path) -> None:
    workspace(tmp_path)
    write(tmp_path, f"{W}/PERSONA.md", "---\n" + "\n".join(PERSONA[:4]) + "\nrole helper\nmode: personal\n---\nHi.\n")
    assert (tmp_path / W / "PERSONA.md").read_text(encoding="utf-8").splitlines()[5] == "role helper"
    (issue,) = errors_for(load(tmp_path), f"{W}/PERSONA.md")
    assert issue.line == 6
    assert issue.message == "invalid YAML: could not find expected ':' (while scanning a simple key)"
    assert str(issue).startswith(f"{W}/PERSONA.md:6: error: invalid YAML")


@pytest.mark.parametrize(
    ("front", "line", "says"),
    [
        ("\n\na: 1\nb: : :", 5, "mapping values are not allowed"),  # blank lines after the opening ---
        ("a: [1, 2\nb: 3", 3, "(while parsing a flow sequence at line 2)"),
        ("a:\n  - x\n - y", 4, "did not find expected key"),
        ("a: |\n  x\n\tb: 1", 4, "tab"),
    ],
)
def test_more_yaml_errors_and_their_lines(tmp_path: Path, front: str, line: int, says: str) -> None:
    path = write(tmp_path, "tenants/acme/workers/w/goals/g.md", f"---\n{front}\n---\nBody with: : : colons\n")
    workspace(tmp_path)
    (issue,) = errors_for(load(tmp_path), "tenants/acme/workers/w/goals/g.md")
    assert issue.line == line, (issue, path.read_text(encoding="utf-8"))
    assert says in issue.message


def test_crlf_line_ends_do_not_shift_lines(tmp_path: Path) -> None:
    workspace(tmp_path)
    write(tmp_path, f"{W}/goals/g.md", "---\r\ngoal_id: g\r\nno colon here\r\ntitle: G\r\n---\r\nBody\r\n")
    (issue,) = errors_for(load(tmp_path), f"{W}/goals/g.md")
    assert issue.line == 3


def test_yaml_like_text_in_the_body_is_not_parsed(tmp_path: Path) -> None:
    workspace(tmp_path)
    write(tmp_path, f"{W}/goals/g.md", '---\ngoal_id: g\ntitle: G\n---\nkey: "unclosed\n: : :\n\tnot: yaml\n')
    registry = load(tmp_path)
    assert errors_for(registry, f"{W}/goals/g.md") == []
    worker = registry.worker("acme", "w")
    assert worker is not None and worker.goals["g"].body.startswith('key: "unclosed')


def test_a_file_that_is_not_regular_is_refused_without_opening_it(tmp_path: Path) -> None:
    workspace(tmp_path)
    fifo = tmp_path / W / "goals" / "pipe.md"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    # a writer, so a loader that opened the pipe would read it empty instead of waiting forever
    writer = threading.Thread(target=lambda: fifo.open("wb").close(), daemon=True)
    writer.start()
    try:
        (issue,) = errors_for(load(tmp_path), f"{W}/goals/pipe.md")
    finally:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # releases the writer if nobody read
        writer.join(timeout=30)
        os.close(reader)
    assert issue.message == "cannot read: not a regular file"
