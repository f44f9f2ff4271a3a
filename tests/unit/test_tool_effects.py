"""EffectResolver: where a tool's effect, risk and approval need come from."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect, RiskLevel, ToolSpec
from genworker.tools.context import ToolScope
from genworker.tools.effects import EffectResolver, ResolvedEffect
from genworker.workspace.errors import WorkspaceError
from genworker.workspace.models.effects import EffectRule, EffectTable, load_effect_table


def spec(name: str, effect: Effect | None = None, risk: RiskLevel = RiskLevel.HIGH, approval: bool = False) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object"}, effect, risk, approval)


def write(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def scope(root: Path, tenant: str = "acme", **kw: Any) -> ToolScope:
    return ToolScope(tenant, "w", "run", root / "tenants" / tenant / "workers" / "w", **kw)


def errors(exc: pytest.ExceptionInfo[WorkspaceError]) -> list[tuple[str, str, str]]:
    return [(i.file, i.field, i.message) for i in exc.value.issues]


def test_undeclared_is_high_risk_external() -> None:
    assert EffectResolver().resolve(spec("mystery")) == ResolvedEffect(
        Effect.EXTERNAL, RiskLevel.HIGH, False, False, "default"
    )


def test_schema_declaration_is_used_as_is() -> None:
    resolved = EffectResolver().resolve(spec("reader", Effect.READ, RiskLevel.MEDIUM))
    assert resolved == ResolvedEffect(Effect.READ, RiskLevel.MEDIUM, False, True, "schema")


def test_precedence_schema_tenant_sidecar_root_sidecar_worker_tenant_overrides(tmp_path: Path) -> None:
    write(
        tmp_path / "tool_effects.yml",
        """
        a: {effect: read}
        b: {effect: read}
        c: {effect: read}
        """,
    )
    write(
        tmp_path / "tenants/acme/tool_effects.yaml",
        """
        a: {effect: compute}
        b: {effect: compute}
        """,
    )
    worker = EffectTable.from_mapping({n: {"effect": "write"} for n in "abcd"}, "PERSONA.md")
    tenant = EffectTable.from_mapping({n: {"effect": "delegate"} for n in "abcde"}, "TENANT.json")
    resolver = EffectResolver(tmp_path)
    run = scope(tmp_path, worker_effect_overrides=worker, tenant_effect_overrides=tenant)
    got = {n: resolver.resolve(spec(n, Effect.EXTERNAL if n == "a" else None), run) for n in "abcdef"}
    assert {n: (r.effect.value, r.source) for n, r in got.items()} == {
        "a": ("external", "schema"),
        "b": ("compute", "tenants/acme/tool_effects.yaml"),
        "c": ("read", "tool_effects.yml"),
        "d": ("write", "PERSONA.md"),
        "e": ("delegate", "TENANT.json"),
        "f": ("external", "default"),
    }
    assert not got["f"].declared and got["e"].declared


def test_tenant_sidecar_only_applies_to_its_tenant(tmp_path: Path) -> None:
    write(tmp_path / "tenants/acme/tool_effects.yml", "x: {effect: read}\n")
    resolver = EffectResolver(tmp_path)
    assert resolver.resolve(spec("x"), scope(tmp_path, "acme")).effect is Effect.READ
    assert resolver.resolve(spec("x"), scope(tmp_path, "other")).effect is Effect.EXTERNAL
    assert resolver.resolve(spec("x")).effect is Effect.EXTERNAL
    assert resolver.sidecars == ("tenants/acme/tool_effects.yml",)


def test_patterns_and_per_field_merge(tmp_path: Path) -> None:
    write(
        tmp_path / "tool_effects.yml",
        """
        github__create_issue: {risk_level: medium}
        github__*: {effect: external, requires_approval: true}
        github__get_*: {effect: read}
        "*": {risk_level: low}
        """,
    )
    resolver = EffectResolver(tmp_path)
    create = resolver.resolve(spec("github__create_issue"))
    assert (create.effect, create.risk_level, create.requires_approval) == (Effect.EXTERNAL, RiskLevel.MEDIUM, True)
    # file order: github__* comes before github__get_*, so its effect wins
    get = resolver.resolve(spec("github__get_issue"))
    assert (get.effect, get.risk_level, get.requires_approval) == (Effect.EXTERNAL, RiskLevel.LOW, True)


def test_risk_follows_effect_when_not_declared() -> None:
    table = EffectTable.from_mapping({n.value: {"effect": n.value} for n in Effect}, "T")
    resolver = EffectResolver()
    risks = {
        n.value: resolver.resolve(spec(n.value), scope(Path("/x"), tenant_effect_overrides=table)).risk_level
        for n in Effect
    }
    assert risks == {"read": "low", "compute": "low", "write": "medium", "external": "high", "delegate": "high"}


def test_declared_risk_is_ignored_for_undeclared_effect() -> None:
    table = EffectTable.from_mapping({"x": {"risk_level": "low"}}, "T")
    resolved = EffectResolver().resolve(spec("x"), scope(Path("/x"), tenant_effect_overrides=table))
    assert (resolved.effect, resolved.risk_level) == (Effect.EXTERNAL, RiskLevel.HIGH)


def test_requires_approval_only_tightens() -> None:
    table = EffectTable.from_mapping({"r": {"requires_approval": True}, "s": {"requires_approval": False}}, "T")
    run = scope(Path("/x"), worker_effect_overrides=table)
    resolver = EffectResolver()
    assert resolver.resolve(spec("r", Effect.READ, RiskLevel.LOW), run).requires_approval
    assert resolver.resolve(spec("s", Effect.WRITE, RiskLevel.LOW, approval=True), run).requires_approval
    assert resolver.resolve(spec("u", approval=True)).requires_approval


def test_table_lookup() -> None:
    table = EffectTable.from_mapping({"a_*": {"effect": "read"}, "a_b": {"effect": "write"}}, "T")
    assert list(table.matches("a_b")) == [EffectRule(Effect.WRITE), EffectRule(Effect.READ)]
    assert list(table.matches("b")) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "t: {effect: teleport}\n",
            ("t.effect", "Input should be 'read', 'compute', 'write', 'external' or 'delegate'"),
        ),
        ("t: {effect: read, risk: low}\n", ("t.risk", "Extra inputs are not permitted")),
        ("t: {requires_approval: 'yes'}\n", ("t.requires_approval", "Input should be a valid boolean")),
        ("t: {risk_level: extreme}\n", ("t.risk_level", "Input should be 'low', 'medium' or 'high'")),
        ("t: read\n", ("t", "must be a mapping with effect / risk_level / requires_approval / resource")),
        ("t: {}\n", ("t", "declares none of effect, risk_level, requires_approval, resource")),
        (
            "t: {resource: {key: 'gh:{0.__class__}'}}\n",
            (
                "t.resource.key",
                "Value error, 'gh:{0.__class__}': placeholders are argument names such as {number}, got {0.__class__}",
            ),
        ),
        (
            "t: {resource: {key: x, reversibility: maybe}}\n",
            ("t.resource.reversibility", "Input should be 'reversible', 'undo_window' or 'irreversible'"),
        ),
        ("'bad name!': {effect: read}\n", ("bad name!", "is not a tool name or fnmatch pattern")),
        ("- t\n", ("", "must be a mapping of tool name to effect, got list")),
    ],
)
def test_bad_sidecar_names_file_tool_and_field(tmp_path: Path, body: str, expected: tuple[str, str]) -> None:
    write(tmp_path / "tenants/acme/tool_effects.yml", body)
    with pytest.raises(WorkspaceError) as caught:
        EffectResolver(tmp_path)
    assert errors(caught) == [("tenants/acme/tool_effects.yml", *expected)]
    assert str(caught.value).startswith("tenants/acme/tool_effects.yml: error:")


def test_a_resource_comes_from_the_first_table_declaring_one_and_is_filled_from_the_arguments(tmp_path: Path) -> None:
    write(
        tmp_path / "tenants/acme/tool_effects.yml",
        """
        gh_close: {resource: {key: "github:issue:{number}", operation: "set_status:closed", version_arg: etag}}
        """,
    )
    write(tmp_path / "tool_effects.yml", "gh_*: {effect: external, resource: {key: 'github:*'}}\n")
    resolved = EffectResolver(tmp_path).resolve(spec("gh_close"), scope(tmp_path))
    assert resolved.effect is Effect.EXTERNAL and resolved.resource is not None
    assert resolved.resource.fill("gh_close", {"number": 42, "etag": "W/1"}) == (
        "github:issue:42",
        "set_status:closed",
        "W/1",
    )
    assert resolved.resource.fill("gh_close", {"etag": "W/1"}) is None  # the key names a missing argument


def test_every_bad_entry_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "tool_effects.yml", "a: {effect: x}\nb: {effect: read}\nc: {risk_level: y}\n")
    with pytest.raises(WorkspaceError) as caught:
        load_effect_table(path, "tool_effects.yml")
    assert [field for _, field, _ in errors(caught)] == ["a.effect", "c.risk_level"]


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    write(tmp_path / "tool_effects.yml", "a: {effect: read}\nb: [unclosed\n")
    with pytest.raises(WorkspaceError) as caught:
        EffectResolver(tmp_path)
    [issue] = caught.value.issues
    assert (issue.file, issue.line) == ("tool_effects.yml", 3)
    assert issue.message.startswith("invalid YAML")


def test_empty_sidecar_is_an_empty_table(tmp_path: Path) -> None:
    write(tmp_path / "tool_effects.yml", "# nothing yet\n")
    assert EffectResolver(tmp_path).resolve(spec("x")).source == "default"


def test_both_yml_and_yaml_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "tool_effects.yml", "a: {effect: read}\n")
    write(tmp_path / "tool_effects.yaml", "a: {effect: read}\n")
    with pytest.raises(WorkspaceError, match=r"both tool_effects.yml and tool_effects.yaml exist"):
        EffectResolver(tmp_path)


def test_sidecar_symlink_leaving_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside/tool_effects.yml", "a: {effect: read}\n")
    root = tmp_path / "ws"
    (root / "tenants/acme").mkdir(parents=True)
    (root / "tenants/acme/tool_effects.yml").symlink_to(outside)
    with pytest.raises(WorkspaceError, match="symlink leaves the workspace"):
        EffectResolver(root)


def test_failed_reload_keeps_the_previous_tables(tmp_path: Path) -> None:
    path = write(tmp_path / "tool_effects.yml", "a: {effect: read}\n")
    resolver = EffectResolver(tmp_path)
    path.write_text("a: {effect: nope}\n", encoding="utf-8")
    with pytest.raises(WorkspaceError):
        resolver.reload()
    assert resolver.resolve(spec("a")).effect is Effect.READ
    path.write_text("a: {effect: write}\n", encoding="utf-8")
    resolver.reload()
    assert resolver.resolve(spec("a")).effect is Effect.WRITE


def test_override_mappings_name_their_field_prefix() -> None:
    with pytest.raises(WorkspaceError) as caught:
        EffectTable.from_mapping({"t": {"effect": "x"}}, "tenants/acme/workers/w/PERSONA.md", "tool_effect_overrides")
    assert errors(caught)[0][:2] == ("tenants/acme/workers/w/PERSONA.md", "tool_effect_overrides.t.effect")
