"""TENANT.json `execution_depths`: what each depth buys; a depth or field left out keeps its default."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from genworker.workspace.models import Tenant


def test_defaults() -> None:
    depths = Tenant(tenant_id="t").execution_depths
    assert [(b.tier, b.max_rounds, b.token_budget) for b in (depths.quick, depths.standard, depths.deep)] == [
        ("fast", 4, 40_000),
        ("standard", 10, 200_000),
        ("strong", 20, 600_000),
    ]


def test_a_tenant_overrides_single_fields() -> None:
    tenant = Tenant.model_validate(
        {"tenant_id": "t", "execution_depths": {"quick": {"max_rounds": 2}, "deep": {"tier": "reasoning"}}}
    )
    assert tenant.execution_depths.budget("quick").model_dump() == {
        "tier": "fast",
        "max_rounds": 2,
        "token_budget": 40_000,
    }
    assert tenant.execution_depths.budget("deep").tier == "reasoning"
    assert tenant.execution_depths.budget("standard").max_rounds == 10


@pytest.mark.parametrize(
    "bad", [{"quick": {"tier": "huge"}}, {"deep": {"max_rounds": 0}}, {"standard": {"token_budget": -1}}]
)
def test_bad_values_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="execution_depths"):
        Tenant.model_validate({"tenant_id": "t", "execution_depths": bad})
