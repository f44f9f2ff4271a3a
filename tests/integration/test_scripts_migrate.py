"""scripts/migrate_workspace.py on temp workspaces: our earlier spellings rewritten into the current
format (posture values out of execution_policy, callback secrets out of PERSONA.md), a dry run by
default, atomic writes with --write, nothing lost, secrets never printed."""

from __future__ import annotations

import importlib.util
import json
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from genworker.workspace.registry import WorkspaceRegistry

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "migrate_workspace.py"

# the demo's duties that once wrote their posture in execution_policy (renamed by hand since)
RENAMED = [
    "analyst/duties/_defaults.md",
    "analyst/duties/data-request.md",
    "analyst/duties/weekly-metrics-review.md",
    "assistant/duties/_defaults.md",
    "assistant/duties/inbox-triage.md",
    "assistant/duties/morning-brief.md",
]
SECRETS = {
    "encrypt_key": "feishu-encrypt-0123456789",
    "verificationToken": "feishu-verify-0123456789",
    "callback_token": "wecom-token-0123456789",
    "encoding_aes_key": "wecom-aes-0123456789abcdef",
}


def migrate(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--workspace", str(workspace), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    """The script as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("migrate_workspace", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def worker_with(tmp_path: Path, persona_extra: str = "", trust: int = 1) -> Path:
    root = tmp_path / "ws"
    write(root / "tenants/acme/TENANT.json", json.dumps({"tenant_id": "acme", "trust_level": trust}))
    write(
        root / "tenants/acme/workers/w/PERSONA.md",
        f"---\nidentity:\n  name: W\n  worker_id: w\n{persona_extra}---\nBe helpful.\n",
    )
    return root


def warnings_of(root: Path) -> list[str]:
    registry = WorkspaceRegistry(root)
    registry.load_all()
    assert [i for i in registry.issues() if i.severity == "error"] == []
    return [f"{i.field}: {i.message}" for i in registry.issues() if i.severity == "warning"]


def test_the_demo_in_the_old_spelling_comes_back_byte_for_byte(demo_workspace: Path) -> None:
    """The rename done by hand in the demo's duties, undone: the script redoes it exactly."""
    migrated = files(demo_workspace)
    workers = demo_workspace / "tenants/demo/workers"
    for rel in RENAMED:
        path = workers / rel
        path.write_text(path.read_text(encoding="utf-8").replace("\nposture:", "\nexecution_policy:"), encoding="utf-8")
    old = files(demo_workspace)
    assert old != migrated and any("is a posture" in w for w in warnings_of(demo_workspace))

    dry = migrate(demo_workspace)
    assert dry.returncode == 0, dry.stderr
    assert files(demo_workspace) == old  # a dry run writes nothing
    assert dry.stdout.count("-execution_policy:\n+posture:\n") == len(RENAMED)
    assert dry.stdout.splitlines()[-1] == "6 files would change; run again with --write to apply"

    done = migrate(demo_workspace, "--write")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "wrote 6 files"
    assert files(demo_workspace) == migrated
    again = migrate(demo_workspace)
    assert (again.returncode, again.stdout) == (0, "nothing to migrate\n")


def test_depth_stays_posture_moves_comments_and_flow_style_kept(tmp_path: Path, script: ModuleType) -> None:
    root = worker_with(tmp_path)
    duty = write(
        root / "tenants/acme/workers/w/duties/watch.md",
        """
        ---
        duty_id: watch
        title: Watch the loads
        triggers:
          - id: nightly
            type: schedule
            cron: "0 2 * * *"
          - id: by-hand
            type: manual
        # depth and posture in one place (our earlier spelling)
        execution_policy:   # kept for the depth
          default: deep
          overrides: {nightly: draft, by-hand: quick}
        duty_defaults:
          execution_policy: {default: propose}
        ---
        Check last night's loads.
        """,
    )
    before = WorkspaceRegistry(root)
    before.load_all()
    assert script.main(["--workspace", str(root), "--write"]) == 0
    assert duty.read_text(encoding="utf-8") == textwrap.dedent(
        """\
        ---
        duty_id: watch
        title: Watch the loads
        triggers:
          - id: nightly
            type: schedule
            cron: "0 2 * * *"
          - id: by-hand
            type: manual
        # depth and posture in one place (our earlier spelling)
        execution_policy:   # kept for the depth
          default: deep
          overrides: {by-hand: quick}
        posture:
          overrides: {nightly: draft}
        duty_defaults:
          posture: {default: propose}
        ---
        Check last night's loads.
        """
    )
    assert warnings_of(root) == []
    after = WorkspaceRegistry(root)
    after.load_all()
    old, new = (r.worker("acme", "w") for r in (before, after))
    assert old is not None and new is not None
    assert (new.duties["watch"].execution_policy, new.duties["watch"].posture) == (
        old.duties["watch"].execution_policy,
        old.duties["watch"].posture,
    )
    assert new.duties["watch"].posture.posture_for("nightly") == "draft"
    assert new.duties["watch"].posture.posture_for("by-hand") == "propose"  # from duty_defaults


def test_a_posture_already_written_wins_and_the_old_value_is_left_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: ModuleType
) -> None:
    root = worker_with(tmp_path)
    text = (
        "---\nduty_id: both\ntitle: Both\nexecution_policy: {default: draft}\nposture: {default: execute}\n---\nDo.\n"
    )
    duty = write(root / "tenants/acme/workers/w/duties/both.md", text)
    assert script.main(["--workspace", str(root), "--write"]) == 1
    assert duty.read_text(encoding="utf-8") == text
    out = capsys.readouterr().out
    assert "nothing to migrate" in out
    said = "execution_policy.default 'draft': posture.default is written too and wins"
    assert f"tenants/acme/workers/w/duties/both.md: {said}" in out


PERSONA_CHANNELS = """\
# channels the worker answers on
channels:
  - type: feishu
    chat_ids: [oc_group]
    features:
      mention_required: true   # only when mentioned
      encrypt_key: feishu-encrypt-0123456789
      verificationToken: feishu-verify-0123456789
  - type: wecom
    chat_ids: [wr_group]
    features:
      callback_token: wecom-token-0123456789
      encoding_aes_key: wecom-aes-0123456789abcdef
"""
CREDENTIALS = {
    "feishu": {"app_id": "cli_app", "app_secret": "feishu-app-secret-0123"},
    "wecom": {"corpid": "ww_corp", "corpsecret": "wecom-corp-secret-0123", "agent_id": 1000002},
}


def test_callback_secrets_move_to_channel_credentials_and_are_never_printed(tmp_path: Path) -> None:
    root = worker_with(tmp_path, PERSONA_CHANNELS)
    creds = write(root / "tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps(CREDENTIALS, indent=2))
    creds.chmod(0o600)
    assert sum("a secret in PERSONA.md" in w for w in warnings_of(root)) == 4

    dry = migrate(root)
    assert dry.returncode == 0, dry.stderr
    printed = dry.stdout + dry.stderr
    hidden = [*SECRETS.values(), "feishu-app-secret-0123", "wecom-corp-secret-0123", "cli_app", "ww_corp"]
    assert [s for s in hidden if s in printed] == []
    assert '+    "encrypt_key": "<secret>",' in printed and "-      encrypt_key: <secret>" in printed

    done = migrate(root, "--write")
    assert done.returncode == 0, done.stderr
    assert json.loads(creds.read_text(encoding="utf-8")) == {
        "feishu": {
            **CREDENTIALS["feishu"],
            "encrypt_key": SECRETS["encrypt_key"],
            "verification_token": SECRETS["verificationToken"],
        },
        "wecom": {
            **CREDENTIALS["wecom"],
            "token": SECRETS["callback_token"],
            "encoding_aes_key": SECRETS["encoding_aes_key"],
        },
    }
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    persona = (root / "tenants/acme/workers/w/PERSONA.md").read_text(encoding="utf-8")
    assert [s for s in SECRETS.values() if s in persona] == []
    assert (
        "      mention_required: true   # only when mentioned\n  - type: wecom\n    chat_ids: [wr_group]\n---"
        in persona
    )
    assert warnings_of(root) == []
    registry = WorkspaceRegistry(root)
    registry.load_all()
    worker = registry.worker("acme", "w")
    assert worker is not None and worker.credentials is not None and worker.credentials.feishu is not None
    assert worker.credentials.feishu.encrypt_key is not None
    assert worker.credentials.feishu.encrypt_key.get_secret_value() == SECRETS["encrypt_key"]


def test_a_secret_with_nowhere_to_go_stays_where_it_is(tmp_path: Path, script: ModuleType) -> None:
    """No wecom section to take it (one with only a secret would not load), and a feishu key already
    set to another value: both stay in PERSONA.md and are listed; the one equal to the file's is dropped."""
    root = worker_with(tmp_path, PERSONA_CHANNELS)
    feishu = {
        **CREDENTIALS["feishu"],
        "encrypt_key": "another-key-0123456789",
        "verification_token": SECRETS["verificationToken"],
    }
    creds = write(root / "tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps({"feishu": feishu}, indent=2))
    plan = script.plan_workspace(root)
    assert sorted(plan.left) == [
        "tenants/acme/workers/w/PERSONA.md: channels[0].features.encrypt_key: CHANNEL_CREDENTIALS.json has another "
        "feishu.encrypt_key, which is used; compare them",
        "tenants/acme/workers/w/PERSONA.md: channels[1].features.callback_token: CHANNEL_CREDENTIALS.json has no "
        "wecom section; add the app credentials there first",
        "tenants/acme/workers/w/PERSONA.md: channels[1].features.encoding_aes_key: CHANNEL_CREDENTIALS.json has no "
        "wecom section; add the app credentials there first",
    ]
    assert script.verify(plan) == []
    assert script.write(plan) == []
    assert json.loads(creds.read_text(encoding="utf-8")) == {"feishu": feishu}  # nothing to add
    persona = (root / "tenants/acme/workers/w/PERSONA.md").read_text(encoding="utf-8")
    assert "verificationToken" not in persona  # the credentials already hold that very value
    assert [k for k in SECRETS if k in persona] == ["encrypt_key", "callback_token", "encoding_aes_key"]


def test_nothing_is_written_when_the_rewritten_workspace_would_read_differently(
    tmp_path: Path, script: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = worker_with(tmp_path)
    write(
        root / "tenants/acme/workers/w/duties/d.md",
        "---\nduty_id: d\ntitle: D\nexecution_policy: {default: draft}\n---\nDo.\n",
    )
    before = files(root)
    monkeypatch.setattr(script, "compare", lambda *args: ["acme/w: duties ['d'] would read differently"])
    assert script.main(["--workspace", str(root), "--write"]) == 1
    assert files(root) == before
    assert "not written: the rewritten workspace would not load the same" in capsys.readouterr().err


def test_a_file_changed_after_it_was_read_is_left_alone(tmp_path: Path, script: ModuleType) -> None:
    root = worker_with(tmp_path)
    duty = write(
        root / "tenants/acme/workers/w/duties/d.md",
        "---\nduty_id: d\ntitle: D\nexecution_policy: {default: draft}\n---\nDo.\n",
    )
    plan = script.plan_workspace(root)
    edited = duty.read_text(encoding="utf-8").replace("Do.", "Do it now.")
    duty.write_text(edited, encoding="utf-8")  # someone saves the file meanwhile
    assert script.write(plan) == [
        "tenants/acme/workers/w/duties/d.md: changed since it was read; run the migration again"
    ]
    assert duty.read_text(encoding="utf-8") == edited


def test_a_folder_that_is_no_workspace_is_refused(tmp_path: Path) -> None:
    result = migrate(tmp_path)
    assert result.returncode == 1
    assert result.stderr == f"migrate: {tmp_path} is not a workspace (no tenants/ folder)\n"


def test_it_never_writes_through_a_hard_link_of_the_check(tmp_path: Path, script: ModuleType) -> None:
    """The check loads a mirror made of hard links: rewriting a file there must not touch the original."""
    root = worker_with(tmp_path)
    duty = write(
        root / "tenants/acme/workers/w/duties/d.md",
        "---\nduty_id: d\ntitle: D\nexecution_policy: {default: draft}\n---\nDo.\n",
    )
    text = duty.read_text(encoding="utf-8")
    plan = script.plan_workspace(root)
    assert script.verify(plan) == []
    assert duty.read_text(encoding="utf-8") == text and duty.stat().st_nlink == 1
