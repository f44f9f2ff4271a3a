import pytest

from genworker.workspace.errors import WorkspaceError
from genworker.workspace.scan import Scope
from genworker.workspace.tenant_loader import default_worker_issues, load_tenant


def test_tenant_loads_with_workers(ws) -> None:
    ws.tenant(name="Acme", default_worker="w", tool_policy={"denied_tools": ["shell_exec"]})
    ws.persona()
    scope = Scope(ws.root.resolve())
    state = load_tenant(scope, scope.root / "tenants/acme", {}, version=7)
    assert state.tenant_id == "acme"
    assert state.tenant.tool_policy.denied_tools == ("shell_exec",)
    assert list(state.workers) == ["w"]
    assert state.workers["w"].version == 7
    assert state.failures == {}
    assert state.issues == ()


def load_error(ws, tenant_id: str = "acme") -> WorkspaceError:
    scope = Scope(ws.root.resolve())
    with pytest.raises(WorkspaceError) as caught:
        load_tenant(scope, scope.root / "tenants" / tenant_id, {})
    return caught.value


def test_missing_tenant_json(ws) -> None:
    ws.persona()
    (issue,) = load_error(ws).issues
    assert (issue.file, issue.message) == ("tenants/acme/TENANT.json", "missing TENANT.json")


def test_tenant_id_must_equal_folder(ws) -> None:
    ws.write("tenants/acme/TENANT.json", '{\n  "name": "Acme",\n  "tenant_id": "globex"\n}')
    (issue,) = load_error(ws).issues
    assert issue.field == "tenant_id"
    assert issue.line == 3
    assert "'globex' must equal the folder name 'acme'" in issue.message


def test_invalid_tenant_json_names_the_line(ws) -> None:
    ws.write("tenants/acme/TENANT.json", '{\n  "tenant_id": "acme",\n  oops\n}')
    (issue,) = load_error(ws).issues
    assert issue.line == 3
    assert issue.message.startswith("invalid JSON")


def test_unknown_tenant_fields_warn(ws) -> None:
    ws.tenant(colour="red")
    scope = Scope(ws.root.resolve())
    state = load_tenant(scope, scope.root / "tenants/acme", {})
    assert [(i.severity, i.field, i.line) for i in state.issues] == [("warning", "colour", 3)]


def test_default_worker_without_a_folder_is_a_warning(ws) -> None:
    """Upstream does not check it; here it is ignored, with a warning."""
    ws.tenant(default_worker="ghost")
    ws.persona()
    scope = Scope(ws.root.resolve())
    state = load_tenant(scope, scope.root / "tenants/acme", {})
    assert state.issues == ()
    (issue,) = default_worker_issues(state)
    assert (issue.severity, issue.field) == ("warning", "default_worker")
    assert issue.message == "default_worker 'ghost' has no folder under workers/ (ignored)"
    assert list(state.workers) == ["w"]


def test_default_worker_that_failed_is_not_reported_missing(ws) -> None:
    ws.tenant(default_worker="w")
    ws.write("tenants/acme/workers/w/PERSONA.md", "no front matter")
    scope = Scope(ws.root.resolve())
    state = load_tenant(scope, scope.root / "tenants/acme", {})
    assert state.issues == ()
    assert list(state.failures) == ["w"]


def test_one_broken_worker_does_not_stop_the_others(ws) -> None:
    ws.tenant()
    ws.persona(worker_id="alpha")
    ws.persona(worker_id="broken", extra="mode: boss\n")
    ws.persona(worker_id="zeta")
    registry = ws.registry()
    assert [w.worker_id for w in registry.workers()] == ["alpha", "zeta"]
    (failure,) = registry.failures()
    assert (failure.tenant_id, failure.worker_id) == ("acme", "broken")
    assert [(e.field, e.line) for e in failure.errors] == [("mode", 5)]
    described = registry.describe()["tenants"]["acme"]["workers"]
    assert described["alpha"]["status"] == described["zeta"]["status"] == "loaded"
    assert described["broken"]["status"] == "failed"
    assert described["broken"]["errors"][0]["field"] == "mode"
    assert described["broken"]["errors"][0]["file"] == "tenants/acme/workers/broken/PERSONA.md"
    assert registry.summary().failed_workers == 1


def test_broken_tenant_json_fails_only_that_tenant(ws) -> None:
    ws.tenant("acme")
    ws.persona("acme", "w")
    ws.write("tenants/broken/TENANT.json", '{"tenant_id": "broken", "trust_level": 99}')
    ws.persona("broken", "w")
    ws.persona("missing", "w")  # no TENANT.json at all
    registry = ws.registry()
    assert [t.tenant_id for t in registry.tenants()] == ["acme"]
    assert registry.worker("acme", "w") is not None
    tenants = registry.describe()["tenants"]
    assert tenants["acme"]["status"] == "loaded"
    assert tenants["broken"]["status"] == "failed"
    assert tenants["broken"]["errors"][0]["field"] == "trust_level"
    assert tenants["missing"] == {
        "status": "failed",
        "errors": [
            {
                "severity": "error",
                "file": "tenants/missing/TENANT.json",
                "field": "",
                "line": None,
                "message": "missing TENANT.json",
            }
        ],
    }
    assert registry.summary().tenants == 1


def test_workspace_without_tenants_folder(ws) -> None:
    registry = ws.registry()
    assert registry.tenants() == []
    (issue,) = registry.issues()
    assert issue.message == "workspace has no tenants/ folder"
