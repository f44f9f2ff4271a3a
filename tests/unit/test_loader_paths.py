"""Path safety: symlinks out of the workspace and folder names that are not ids are refused."""

from pathlib import Path

import pytest

REFUSED = "refused: symlink leaves the workspace"


def two_workers(ws) -> None:
    ws.tenant()
    ws.persona(worker_id="good")


def test_worker_folder_symlinked_outside_is_refused_and_the_rest_loads(ws, outside: Path) -> None:
    two_workers(ws)
    (outside / "PERSONA.md").write_text("---\nidentity:\n  name: E\n  worker_id: evil\n---\n", encoding="utf-8")
    (ws.root / "tenants/acme/workers/evil").symlink_to(outside, target_is_directory=True)
    registry = ws.registry()
    assert [w.worker_id for w in registry.workers()] == ["good"]
    assert registry.worker("acme", "evil") is None
    refused = [i for i in registry.issues() if i.message == REFUSED]
    assert [(i.file, i.severity) for i in refused] == [("tenants/acme/workers/evil", "error")]


def test_worker_folder_symlink_inside_the_workspace_is_accepted(ws) -> None:
    two_workers(ws)
    ws.persona(tenant_id="archive", worker_id="shared")
    (ws.root / "tenants/acme/workers/shared").symlink_to(ws.worker_dir("archive", "shared"), target_is_directory=True)
    registry = ws.registry()
    assert registry.worker("acme", "shared") is not None
    assert registry.worker("acme", "good") is not None


def test_duty_file_symlinked_outside_is_refused_and_other_workers_load(ws, outside: Path) -> None:
    two_workers(ws)
    ws.persona(worker_id="w")
    ws.duty("ok")
    secret = outside / "steal.md"
    secret.write_text("---\nduty_id: steal\ntitle: t\n---\nSecret.\n", encoding="utf-8")
    (ws.worker_dir() / "duties" / "steal.md").symlink_to(secret)
    registry = ws.registry()
    assert registry.worker("acme", "good") is not None
    # a worker loads whole or not at all: the refused file fails it, naming the file
    (failure,) = registry.failures()
    assert failure.worker_id == "w"
    assert [(e.file, e.message) for e in failure.errors] == [("tenants/acme/workers/w/duties/steal.md", REFUSED)]


def test_duty_file_symlink_inside_the_worker_is_accepted(ws) -> None:
    ws.persona()
    ws.duty("real")
    ws.write("tenants/acme/workers/w/library/other.md", "---\nduty_id: other\ntitle: t\n---\nDo.\n")
    (ws.worker_dir() / "duties" / "other.md").symlink_to(ws.worker_dir() / "library" / "other.md")
    worker, _ = ws.load_worker()
    assert sorted(worker.duties) == ["other", "real"]


@pytest.mark.parametrize(
    "rel",
    [
        "PERSONA.md",
        "CHANNEL_CREDENTIALS.json",
        "duties/_defaults.md",
        "contacts/index.jsonl",
        "skills/helper/SKILL.md",
        "goals/g.md",
        "rules/directives/r.md",
        "contacts/configured/p.md",
    ],
)
def test_fixed_name_files_symlinked_outside_are_refused(ws, outside: Path, rel: str) -> None:
    ws.persona()
    ws.skill("tenants/acme/workers/w/skills/helper")
    target = outside / "target"
    target.write_text("---\nidentity:\n  name: W\n  worker_id: w\n---\nOutside.\n", encoding="utf-8")
    link = ws.worker_dir() / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    errors = ws.worker_errors()
    assert (f"tenants/acme/workers/w/{rel}", REFUSED) in [(e.file, e.message) for e in errors]


def test_skills_dir_symlinked_outside_is_refused(ws, outside: Path) -> None:
    ws.persona()
    ws.skill(str(outside / "skills" / "stolen"))
    (ws.worker_dir() / "skills").symlink_to(outside / "skills", target_is_directory=True)
    (issue,) = ws.worker_errors()
    assert (issue.file, issue.message) == ("tenants/acme/workers/w/skills", REFUSED)  # the folder itself


def test_tenant_json_symlinked_outside_fails_the_tenant(ws, outside: Path) -> None:
    ws.tenant("good")
    ws.persona("evil", "w")
    (outside / "TENANT.json").write_text('{"tenant_id": "evil"}', encoding="utf-8")
    (ws.root / "tenants/evil/TENANT.json").symlink_to(outside / "TENANT.json")
    registry = ws.registry()
    assert [t.tenant_id for t in registry.tenants()] == ["good"]
    described = registry.describe()["tenants"]["evil"]
    assert described["status"] == "failed"
    assert described["errors"][0]["message"] == REFUSED


def test_tenant_folder_symlinked_outside_is_refused(ws, outside: Path) -> None:
    ws.tenant("good")
    (outside / "TENANT.json").write_text('{"tenant_id": "evil"}', encoding="utf-8")
    (ws.root / "tenants/evil").symlink_to(outside, target_is_directory=True)
    registry = ws.registry()
    assert [t.tenant_id for t in registry.tenants()] == ["good"]
    assert "evil" not in registry.describe()["tenants"]
    assert any(i.file == "tenants/evil" and i.message == REFUSED for i in registry.issues())


@pytest.mark.parametrize("name", ["bad name", "-dash", "_under", "a..b", "ünïcode"])
def test_worker_folder_that_is_not_an_id_is_refused(ws, name: str) -> None:
    two_workers(ws)
    (ws.root / "tenants/acme/workers" / name).mkdir()
    registry = ws.registry()
    assert [w.worker_id for w in registry.workers()] == ["good"]
    (issue,) = [i for i in registry.issues() if i.severity == "error"]
    assert issue.file == f"tenants/acme/workers/{name}"
    assert issue.message.startswith("refused: worker id")


def test_tenant_folder_that_is_not_an_id_is_refused(ws) -> None:
    ws.tenant("good")
    (ws.root / "tenants/bad tenant").mkdir()
    registry = ws.registry()
    assert [t.tenant_id for t in registry.tenants()] == ["good"]
    assert [i.file for i in registry.issues() if i.severity == "error"] == ["tenants/bad tenant"]


def test_hidden_folders_and_stray_files_are_skipped_silently(ws) -> None:
    two_workers(ws)
    (ws.root / "tenants/acme/workers/.trash").mkdir()
    ws.write("tenants/acme/workers/README.md", "Workers live here.")
    ws.write("tenants/.DS_Store", "")
    registry = ws.registry()
    assert [w.worker_id for w in registry.workers()] == ["good"]
    assert registry.issues() == []


def test_skills_dir_outside_the_worker_is_refused_by_the_persona(ws) -> None:
    ws.persona(extra="skills_dir: ../../../../system/skills\n")
    (issue,) = ws.worker_errors()
    assert issue.field == "skills_dir"
    assert "relative path inside the worker folder" in issue.message


def test_symlink_loops_are_refused_not_a_crash(ws) -> None:
    two_workers(ws)
    ws.persona(worker_id="w")
    ws.duty("ok")
    duties = ws.worker_dir() / "duties"
    (duties / "loop.md").symlink_to(duties / "loop.md")
    workers = ws.root / "tenants/acme/workers"
    (workers / "ping").symlink_to(workers / "pong")
    (workers / "pong").symlink_to(workers / "ping")
    registry = ws.registry()
    assert registry.worker("acme", "good") is not None
    (failure,) = registry.failures()
    assert [e.file for e in failure.errors] == ["tenants/acme/workers/w/duties/loop.md"]
