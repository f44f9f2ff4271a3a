"""What a tool does to the world (effect, risk, approval need): declared, looked up, or assumed the worst.

`effect` and `risk_level` are each taken from the first layer that declares them:

1. the tool's own spec, when it declares an effect;
2. `tool_effects.yml` / `.yaml` in the tenant folder, then at the workspace root;
3. the worker's `tool_effect_overrides`, then the tenant's (carried by the ToolScope).

`requires_approval` only tightens: any layer (or the spec) saying true makes it true. A `resource`
(what a call changes, for the Conflict Arbiter) comes from the first table that declares one.
Inside one table an exact tool name comes before fnmatch patterns (`github__*`), and patterns
apply in file order. A tool whose effect nobody declares is `external` with risk `high`;
an undeclared risk follows the effect (read/compute low, write medium, external/delegate high).
The tables themselves are workspace file models (`workspace/models/effects.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from genworker.ids import InvalidIdError, is_inside, validate_id
from genworker.tools.base import ToolSpec
from genworker.tools.context import ToolScope
from genworker.workspace.errors import WorkspaceError
from genworker.workspace.models.effects import (
    DEFAULT_RISK,
    EMPTY_TABLE,
    SIDECAR_NAMES,
    Effect,
    EffectTable,
    ResourceDecl,
    RiskLevel,
    load_effect_table,
)

__all__ = ["EffectResolver", "ResolvedEffect"]


@dataclass(frozen=True, slots=True)
class ResolvedEffect:
    effect: Effect
    risk_level: RiskLevel
    requires_approval: bool
    declared: bool  # False: nobody declared the effect, so it is the high-risk default
    source: str  # where the effect came from: "schema", a sidecar file, "worker overrides", ... or "default"
    resource: ResourceDecl | None = None  # what a call changes (docs/conflicts.md)


class EffectResolver:
    """Resolves a tool's effect from its spec, the workspace sidecars and the scope's overrides.

    Sidecars are read when the resolver is built and on `reload()`; a bad file raises
    WorkspaceError and (on reload) leaves the previous tables in place.
    """

    def __init__(self, workspace_root: Path | None = None) -> None:
        self._root = workspace_root
        self._root_table = EMPTY_TABLE
        self._tenant_tables: Mapping[str, EffectTable] = MappingProxyType({})
        if workspace_root is not None:
            self.reload()

    @property
    def sidecars(self) -> tuple[str, ...]:
        tables = (self._root_table, *self._tenant_tables.values())
        return tuple(t.source for t in tables if t.source)

    def reload(self) -> None:
        if self._root is None:
            return
        root = self._root.resolve()
        root_table = _sidecar_in(root, root)
        tenants: dict[str, EffectTable] = {}
        tenants_dir = root / "tenants"
        if tenants_dir.is_dir():
            for folder in sorted(tenants_dir.iterdir()):
                if not folder.is_dir() or not _valid_id(folder.name):
                    continue
                table = _sidecar_in(root, folder)
                if table is not EMPTY_TABLE:
                    tenants[folder.name] = table
        self._root_table, self._tenant_tables = root_table, MappingProxyType(tenants)

    def resolve(self, spec: ToolSpec, scope: ToolScope | None = None) -> ResolvedEffect:
        effect: tuple[Effect, str] | None = None
        risk: RiskLevel | None = None
        approval = spec.requires_approval
        resource: ResourceDecl | None = None
        if spec.effect is not None:
            effect, risk = (spec.effect, "schema"), spec.risk_level
        for table in self._layers(scope):
            for rule in table.matches(spec.name):
                if effect is None and rule.effect is not None:
                    effect = (rule.effect, table.source)
                risk = risk or rule.risk_level
                approval = approval or bool(rule.requires_approval)
                resource = resource or rule.resource
        if effect is None:
            return ResolvedEffect(Effect.EXTERNAL, RiskLevel.HIGH, approval, False, "default", resource)
        return ResolvedEffect(effect[0], risk or DEFAULT_RISK[effect[0]], approval, True, effect[1], resource)

    def _layers(self, scope: ToolScope | None) -> Iterator[EffectTable]:
        if scope is not None and scope.tenant_id in self._tenant_tables:
            yield self._tenant_tables[scope.tenant_id]
        yield self._root_table
        if scope is not None:
            if scope.worker_effect_overrides is not None:
                yield scope.worker_effect_overrides
            if scope.tenant_effect_overrides is not None:
                yield scope.tenant_effect_overrides


def _valid_id(name: str) -> bool:
    try:
        validate_id(name, "tenant id")
    except InvalidIdError:
        return False
    return True


def _sidecar_in(root: Path, folder: Path) -> EffectTable:
    found = [folder / name for name in SIDECAR_NAMES if (folder / name).exists()]
    if not found:
        return EMPTY_TABLE
    display = [p.relative_to(root).as_posix() for p in found]
    if len(found) > 1:
        raise WorkspaceError.single(display[0], f"both {display[0]} and {display[1]} exist; keep one")
    if not is_inside(root, found[0]):
        raise WorkspaceError.single(display[0], "refused: symlink leaves the workspace")
    return load_effect_table(found[0], display[0])
