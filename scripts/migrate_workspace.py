#!/usr/bin/env python3
"""Rewrite our earlier spellings in a workspace into the current format. A dry run unless --write.

What it rewrites (both load today, with a warning from `genworker check`):

- duties (`duties/*.md`, `duties/_defaults.md`, a duty's `duty_defaults`): posture values written in
  `execution_policy` (`propose`, `draft`, `execute`) move to `posture`, entry by entry; the execution
  depth (`quick`, `standard`, `deep`) stays in `execution_policy`;
- PERSONA.md: callback secrets in `channels[].features` (`encrypt_key` / `encryptKey`,
  `verification_token` / `verificationToken`, `callback_token`, `encoding_aes_key`), which are not
  used there, move to CHANNEL_CREDENTIALS.json (`feishu.encrypt_key`, `feishu.verification_token`,
  `wecom.token`, `wecom.encoding_aes_key`), which is not committed to git. Only into a platform
  section that is already there: a section with only a secret would not load.

Nothing is lost: a value is only moved when its new place takes it (an entry already written there
wins, as the loader reads it, and the old one is left where it is and listed), comments and key
order of the front matter stay, and before anything is written the rewritten workspace is loaded
and compared with the one on disk: the same workers, duties (depth and posture included), channels
and credentials, and no new error, or nothing is written.

The diff is printed with secret values replaced by <secret>. --write then replaces each file
atomically (temp file, fsync, rename; its permissions kept), CHANNEL_CREDENTIALS.json before the
PERSONA.md it takes secrets from; a file that changed since it was read is left alone.

Usage: scripts/migrate_workspace.py [--workspace PATH] [--write]
Exit status: 0 done (or nothing to do), 1 something was left alone or could not be checked.
"""

from __future__ import annotations

import argparse
import difflib
import io
import itertools
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from genworker.fsutil import write_atomic
from genworker.workspace.models.duty import POSTURES
from genworker.workspace.models.persona import _FEATURE_SECRETS as FEATURE_SECRETS
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["Plan", "main", "plan_workspace", "verify", "write"]

CREDENTIALS = "CHANNEL_CREDENTIALS.json"
DEFAULTS_FILE = "_defaults.md"
SECRET = "<secret>"
# runtime state (ours and upstream's): never read by the loader, not copied for the check
RUNTIME_DIRS = frozenset({".git", "runs", "tasks", "memory", "runtime", "sensor_snapshots", "sessions"})


@dataclass
class Change:
    path: Path
    rel: str
    old: str
    new: str
    what: list[str] = field(default_factory=list)

    def shown(self, text: str, secrets: set[str]) -> str:
        """`text` as the diff shows it: every credential value, and the secrets PERSONA.md gives up,
        replaced by <secret>."""
        if self.path.name == CREDENTIALS:
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                return SECRET + "\n"
            return json.dumps(_masked(data), indent=_json_indent(self.new), ensure_ascii=False) + "\n"
        for value in sorted(secrets, key=len, reverse=True):
            text = text.replace(value, SECRET) if value else text
        return text


def _masked(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: v if k == "schema_version" else _masked(v) for k, v in data.items()}
    return SECRET


@dataclass
class Plan:
    root: Path
    changes: dict[Path, Change] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)  # what stays as it is, and why
    secrets: set[str] = field(default_factory=set)  # values to hide in the diff

    def edit(self, path: Path, old: str, new: str, what: str) -> None:
        change = self.changes.get(path)
        if change is None:
            change = self.changes[path] = Change(path, path.relative_to(self.root).as_posix(), old, old)
        change.new = new
        change.what.append(what)

    def text(self, path: Path) -> str:
        """The file as the plan leaves it so far."""
        change = self.changes.get(path)
        return change.new if change is not None else path.read_text(encoding="utf-8")


# -- front matter, edited round trip ---------------------------------------------------------------


@dataclass(frozen=True)
class FrontMatter:
    head: str
    front: str
    close: str
    body: str


def split_front_matter(text: str) -> FrontMatter | None:
    lines = text.splitlines(keepends=True)
    start = 0  # blank lines before the opening '---' are fine, as the loader reads them
    while start < len(lines) - 1 and not lines[start].lstrip("\ufeff").strip():
        start += 1
    if not lines or lines[start].lstrip("\ufeff").rstrip() != "---":
        return None
    for i in range(start + 1, len(lines)):
        if lines[i].rstrip() == "---":
            return FrontMatter(
                "".join(lines[: start + 1]), "".join(lines[start + 1 : i]), lines[i], "".join(lines[i + 1 :])
            )
    return None


def _mapping_indent(front: str) -> int:
    lines = [ln for ln in front.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line, following in itertools.pairwise(lines):
        stripped = following.lstrip()
        if line.rstrip().endswith(":") and not line.lstrip().startswith("- ") and not stripped.startswith("- "):
            step = len(following) - len(stripped) - (len(line) - len(line.lstrip()))
            if step > 0:
                return step
    return 2


def _sequence_indent(front: str) -> tuple[int, int]:
    """(sequence indent, dash offset) as the author writes lists."""
    lines = [ln for ln in front.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for line, following in itertools.pairwise(lines):
        if line.rstrip().endswith(":") and following.lstrip().startswith("- "):
            offset = len(following) - len(following.lstrip()) - (len(line) - len(line.lstrip()))
            return offset + 2, offset
    return 2, 0


def edit_front_matter(text: str, rel: str, mutate: Callable[[Any], bool]) -> str:
    """`text` with its front matter changed by `mutate` (True: it changed something); comments, key
    order and quoting stay, the body is kept byte for byte. ValueError when it cannot be read."""
    parts = split_front_matter(text)
    if parts is None:
        raise ValueError(f"{rel}: no YAML front matter")
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap the author's lines
    sequence, offset = _sequence_indent(parts.front)
    rt.indent(mapping=_mapping_indent(parts.front), sequence=sequence, offset=offset)
    try:
        data = rt.load(parts.front)
    except YAMLError as exc:
        raise ValueError(f"{rel}: cannot read the front matter: {exc}") from None
    if not isinstance(data, CommentedMap) or not mutate(data):
        return text
    out = io.StringIO()
    rt.dump(data, out)
    front = out.getvalue()
    if "\r\n" in parts.front:
        front = front.replace("\n", "\r\n")
    return parts.head + front + parts.close + parts.body


# -- duties: posture values out of execution_policy ------------------------------------------------


def _flow_like(source: Any) -> CommentedMap:
    made = CommentedMap()
    if isinstance(source, CommentedMap) and source.fa.flow_style():
        made.fa.set_flow_style()
    return made


def _move_default(policy: CommentedMap, posture: CommentedMap, where: str, left: list[str]) -> list[str]:
    if policy.get("default") not in POSTURES:
        return []
    if "default" in posture:
        left.append(f"{where}execution_policy.default {policy['default']!r}: posture.default is written too and wins")
        return []
    posture["default"] = policy.pop("default")
    return [f"default: {posture['default']}"]


def _move_overrides(policy: CommentedMap, posture: CommentedMap, where: str, left: list[str]) -> list[str]:
    overrides = policy.get("overrides")
    if not isinstance(overrides, CommentedMap):
        return []
    moved: list[str] = []
    for trigger, value in list(overrides.items()):
        if value not in POSTURES:
            continue
        target = posture.get("overrides")
        if target is None:
            target = posture["overrides"] = _flow_like(overrides)
        if not isinstance(target, CommentedMap) or trigger in target:
            left.append(f"{where}execution_policy.overrides.{trigger} {value!r}: posture.overrides has it too and wins")
            continue
        target[trigger] = overrides.pop(trigger)
        moved.append(f"overrides.{trigger}: {value}")
    if moved and not overrides:
        del policy["overrides"]
    return moved


def move_postures(data: CommentedMap, where: str, left: list[str]) -> list[str]:
    """Move posture values of `data["execution_policy"]` to `data["posture"]`; what moved. A value
    `posture` already has stays where it is (the loader reads `posture`'s) and is listed in `left`."""
    policy = data.get("execution_policy")
    posture = data.get("posture", _flow_like(policy))
    if not isinstance(policy, CommentedMap) or not isinstance(posture, CommentedMap):
        return []
    moved = _move_default(policy, posture, where, left) + _move_overrides(policy, posture, where, left)
    if not moved:
        return []
    if "posture" not in data:
        data.insert(list(data).index("execution_policy") + 1, "posture", posture)
    if not policy:
        del data["execution_policy"]
    return moved


def plan_duties(plan: Plan, worker_dir: Path) -> None:
    for path in sorted((worker_dir / "duties").glob("*.md")):
        rel = path.relative_to(plan.root).as_posix()
        left: list[str] = []
        done: list[str] = []

        def mutate(data: Any, left: list[str] = left, done: list[str] = done) -> bool:
            done += move_postures(data, "", left)
            defaults = data.get("duty_defaults")
            if isinstance(defaults, CommentedMap):
                done += [f"duty_defaults: {m}" for m in move_postures(defaults, "duty_defaults.", left)]
            return bool(done)

        text = path.read_text(encoding="utf-8")
        new = edit_front_matter(text, rel, mutate)
        plan.left += [f"{rel}: {why}" for why in left]
        if new != text:
            plan.edit(path, text, new, f"posture values moved out of execution_policy ({'; '.join(done)})")


# -- PERSONA.md: callback secrets to CHANNEL_CREDENTIALS.json -----------------------------------------


@dataclass(frozen=True)
class Secret:
    channel: int
    key: str  # as written in features
    platform: str
    target: str  # key in the platform's section
    value: str


def _persona_secrets(text: str, rel: str) -> list[Secret]:
    found: list[Secret] = []

    def collect(data: Any) -> bool:
        channels = data.get("channels")
        for index, channel in enumerate(channels if isinstance(channels, list) else ()):
            features = channel.get("features") if isinstance(channel, Mapping) else None
            for key, value in (features or {}).items() if isinstance(features, Mapping) else ():
                if key in FEATURE_SECRETS and isinstance(value, str | int):
                    platform, _, target = FEATURE_SECRETS[key].partition(".")
                    found.append(Secret(index, key, platform, target, str(value)))
        return False

    edit_front_matter(text, rel, collect)
    return found


def _decide(
    secrets: list[Secret], creds: Mapping[str, Any] | None, rel: str
) -> tuple[list[Secret], list[Secret], list[str]]:
    """(secrets to add to the credentials, secrets only to remove from PERSONA.md, what stays and why)."""
    add: dict[tuple[str, str], Secret] = {}
    drop: list[Secret] = []
    left: list[str] = []
    values: dict[tuple[str, str], set[str]] = {}
    for s in secrets:
        values.setdefault((s.platform, s.target), set()).add(s.value)
    for s in secrets:
        where = f"{rel}: channels[{s.channel}].features.{s.key}"
        section = creds.get(s.platform) if creds is not None else None
        if creds is None:
            left.append(f"{where}: there is no {CREDENTIALS}; create it with the {s.platform} app credentials first")
        elif not isinstance(section, Mapping):
            left.append(f"{where}: {CREDENTIALS} has no {s.platform} section; add the app credentials there first")
        elif len(values[(s.platform, s.target)]) > 1:
            left.append(f"{where}: the channels hold different values for {s.platform}.{s.target}; move it by hand")
        elif s.target in section and str(section[s.target]) != s.value:
            left.append(f"{where}: {CREDENTIALS} has another {s.platform}.{s.target}, which is used; compare them")
        elif s.target in section or (s.platform, s.target) in add:
            drop.append(s)
        else:
            add[(s.platform, s.target)] = s
    return list(add.values()), drop, left


def _json_indent(text: str) -> int:
    for line in text.splitlines()[1:]:
        if line.strip():
            return max(len(line) - len(line.lstrip()), 1)
    return 2


def plan_secrets(plan: Plan, worker_dir: Path) -> None:
    persona = worker_dir / "PERSONA.md"
    if not persona.is_file():
        return
    rel = persona.relative_to(plan.root).as_posix()
    text = plan.text(persona)
    secrets = _persona_secrets(text, rel)
    if not secrets:
        return
    plan.secrets.update(s.value for s in secrets)
    creds_path = worker_dir / CREDENTIALS
    creds_text = plan.text(creds_path) if creds_path.is_file() else None
    try:
        creds = json.loads(creds_text) if creds_text is not None else None
    except json.JSONDecodeError as exc:
        plan.left.append(
            f"{creds_path.relative_to(plan.root).as_posix()}: not valid JSON ({exc}): secrets stay in {rel}"
        )
        return
    if creds is not None and not isinstance(creds, dict):
        plan.left.append(f"{rel}: {CREDENTIALS} is not a JSON object: secrets stay")
        return
    add, drop, left = _decide(secrets, creds, rel)
    plan.left += left
    if add and creds is not None and creds_text is not None:
        for s in add:
            creds[s.platform][s.target] = s.value
        new_creds = json.dumps(creds, indent=_json_indent(creds_text), ensure_ascii=False) + "\n"
        names = ", ".join(f"{s.platform}.{s.target}" for s in add)
        plan.edit(creds_path, creds_text, new_creds, f"secrets from PERSONA.md: {names}")
    gone = {(s.channel, s.key) for s in add + drop}
    if not gone:
        return

    def remove(data: Any) -> bool:
        for index, key in sorted(gone):
            features = data["channels"][index]["features"]
            del features[key]
            if not features:
                del data["channels"][index]["features"]
        return True

    names = ", ".join(sorted(f"channels[{i}].features.{k}" for i, k in gone))
    plan.edit(persona, text, edit_front_matter(text, rel, remove), f"moved to {CREDENTIALS}: {names}")


# -- the whole workspace ------------------------------------------------------------------------------


def worker_dirs(root: Path) -> Iterator[Path]:
    for tenant in sorted((root / "tenants").glob("*/")):
        for worker in sorted((tenant / "workers").glob("*/")):
            if (worker / "PERSONA.md").is_file():
                yield worker


def plan_workspace(root: Path) -> Plan:
    plan = Plan(root.resolve())
    for worker in worker_dirs(plan.root):
        for step in (plan_duties, plan_secrets):
            try:
                step(plan, worker)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                plan.left.append(f"{worker.relative_to(plan.root).as_posix()}: {exc}")
    return plan


def _mirror(root: Path, dest: Path) -> None:
    """The workspace's definition files under `dest`: hard links where the file system allows, copies
    otherwise. Runtime state and duties' sub-folders (upstream's execution logs) are left out."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        inside_duties = Path(folder).name == "duties"
        return {n for n in names if n in RUNTIME_DIRS or (inside_duties and (Path(folder) / n).is_dir())}

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(root, dest, ignore=ignore, copy_function=link, symlinks=True)


def _loaded(root: Path) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(root)
    registry.load_all()
    return registry


def _credentials(creds: BaseModel | None) -> dict[tuple[str, str], str]:
    """(platform, key) -> value of every credential set, secrets revealed."""
    plain: dict[tuple[str, str], str] = {}
    for platform in type(creds).model_fields if creds is not None else ():
        section = getattr(creds, platform)
        if not isinstance(section, BaseModel):
            continue
        for key in type(section).model_fields:
            value = getattr(section, key)
            if value is not None:
                plain[(platform, key)] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    return plain


def compare(
    before: WorkspaceRegistry, after: WorkspaceRegistry, moved: Mapping[tuple[str, str, str], str]
) -> list[str]:
    """How `after` differs from `before` beyond the planned rewrite (empty: it does not).
    `moved`: (worker folder, platform, key) -> the secret moved into that worker's credentials."""
    problems: list[str] = []
    old_errors = {(i.file, i.field, i.message) for i in before.issues() if i.severity == "error"}
    problems += [
        f"new error: {i}"
        for i in after.issues()
        if i.severity == "error" and (i.file, i.field, i.message) not in old_errors
    ]
    for old in before.workers():
        new = after.worker(old.tenant_id, old.worker_id)
        name = f"{old.tenant_id}/{old.worker_id}"
        if new is None:
            problems.append(f"{name} would not load")
            continue
        if new.persona != old.persona:
            problems.append(f"{name}: PERSONA.md would read differently")
        old_duties = {k: d.model_copy(update={"duty_defaults": {}}) for k, d in old.duties.items()}
        new_duties = {k: d.model_copy(update={"duty_defaults": {}}) for k, d in new.duties.items()}
        if new_duties != old_duties:
            differ = sorted(k for k in old_duties.keys() | new_duties.keys() if old_duties.get(k) != new_duties.get(k))
            problems.append(f"{name}: duties {differ} would read differently")
        expected = _credentials(old.credentials)
        expected.update({(p, k): v for (w, p, k), v in moved.items() if w == name})
        if _credentials(new.credentials) != expected:
            problems.append(f"{name}: {CREDENTIALS} would not hold exactly the old values and the moved secrets")
    return problems


def _moved_secrets(plan: Plan) -> dict[tuple[str, str, str], str]:
    moved: dict[tuple[str, str, str], str] = {}
    for change in plan.changes.values():
        if change.path.name != CREDENTIALS:
            continue
        parts = change.path.relative_to(plan.root).parts  # tenants/{t}/workers/{w}/CHANNEL_CREDENTIALS.json
        name = f"{parts[1]}/{parts[3]}"
        old, new = json.loads(change.old), json.loads(change.new)
        for platform, section in new.items():
            if isinstance(section, dict):
                for key, value in section.items():
                    if key not in (old.get(platform) or {}):
                        moved[(name, platform, key)] = str(value)
    return moved


def verify(plan: Plan) -> list[str]:
    """Load the rewritten workspace (a mirror of its definition files) and compare it with the
    workspace on disk; what differs beyond the rewrite."""
    if not plan.changes:
        return []
    with tempfile.TemporaryDirectory(prefix="genworker-migrate-") as tmp:
        mirror = Path(tmp) / "mirror"
        _mirror(plan.root, mirror)
        for change in plan.changes.values():
            target = mirror / change.rel
            target.unlink()  # a hard link: never write through it
            target.write_text(change.new, encoding="utf-8")
        return compare(_loaded(plan.root), _loaded(mirror), _moved_secrets(plan))


def write(plan: Plan) -> list[str]:
    """Write every change atomically, credentials first; what was left alone because it changed."""
    skipped: list[str] = []
    order = sorted(plan.changes.values(), key=lambda c: (c.path.name != CREDENTIALS, c.rel))
    for change in order:
        if change.path.read_text(encoding="utf-8") != change.old:
            skipped.append(f"{change.rel}: changed since it was read; run the migration again")
            continue
        mode = stat.S_IMODE(change.path.stat().st_mode)
        write_atomic(change.path, change.new.encode("utf-8"), mode=mode)
    return skipped


def diff(plan: Plan) -> str:
    out: list[str] = []
    for change in sorted(plan.changes.values(), key=lambda c: c.rel):
        old, new = change.shown(change.old, plan.secrets), change.shown(change.new, plan.secrets)
        out += difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{change.rel}", f"b/{change.rel}"
        )
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--workspace", type=Path, default=Path("workspace"), help="the workspace folder (default: ./workspace)"
    )
    parser.add_argument("--write", action="store_true", help="apply the changes (default: show them)")
    args = parser.parse_args(argv)
    if not (args.workspace / "tenants").is_dir():
        print(f"migrate: {args.workspace} is not a workspace (no tenants/ folder)", file=sys.stderr)
        return 1
    plan = plan_workspace(args.workspace)
    sys.stdout.write(diff(plan))
    for change in sorted(plan.changes.values(), key=lambda c: c.rel):
        print(f"{change.rel}: {'; '.join(change.what)}")
    problems = verify(plan)
    if problems:
        print("not written: the rewritten workspace would not load the same:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    left = list(plan.left)
    if args.write and plan.changes:
        left += write(plan)
        written = len(plan.changes) - sum(1 for why in left if why.endswith("run the migration again"))
        print(f"wrote {written} file{'s' if written != 1 else ''}")
    elif plan.changes:
        count = len(plan.changes)
        print(f"{count} file{'s' if count != 1 else ''} would change; run again with --write to apply")
    else:
        print("nothing to migrate")
    if left:
        print("left as it is:")
        for why in left:
            print(f"  {why}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
