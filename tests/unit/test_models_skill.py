from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models import SkillLevel, SkillSpec, StrategyMode
from genworker.workspace.models.skill import instruction_blocks, missing_blocks


def skill(strategy: dict[str, Any] | None = None, **fields: Any) -> SkillSpec:
    data: dict[str, Any] = {"name": "web-search", "description": "Search the web.", **fields}
    if strategy is not None:
        data["metadata"] = {"genworker": {"strategy": strategy}}
    return SkillSpec.model_validate(data)


def step(sid: str, kind: str = "llm", **fields: Any) -> dict[str, Any]:
    defaults = {"tool": {"tool": "search"}, "llm": {"instructions": "plan"}, "condition": {"condition": "x > 1"}}
    return {"id": sid, "kind": kind, **defaults.get(kind, {}), **fields}


def test_minimal_skill_defaults() -> None:
    spec = skill()
    assert spec.settings.scope is None
    assert spec.settings.priority == 0
    assert spec.settings.default_skill is False
    assert spec.settings.strategy.mode is StrategyMode.AUTONOMOUS
    assert spec.settings.strategy.max_turns == 10
    assert spec.allowed_tools == ()


@pytest.mark.parametrize("name", ["a", "web-search", "abc-1-x", "x" * 64, "v2"])
def test_skill_name_pattern_accepted(name: str) -> None:
    assert skill(name=name).name == name


@pytest.mark.parametrize("name", ["Web", "web_search", "-web", "web-", "web--search", "web search", "x" * 65, ""])
def test_skill_name_pattern_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        skill(name=name)


@pytest.mark.parametrize("description", ["", "x" * 1025])
def test_description_length(description: str) -> None:
    with pytest.raises(ValidationError, match="description"):
        skill(description=description)


def test_agent_skills_fields() -> None:
    spec = SkillSpec.model_validate(
        {
            "name": "pdf",
            "description": "PDFs.",
            "license": "MIT",
            "allowed-tools": "read_file",
            "metadata": {"author": "someone", "genworker": {"scope": "tenant", "keywords": [{"keyword": "pdf"}]}},
        }
    )
    assert spec.allowed_tools == ("read_file",)
    assert spec.settings.scope is SkillLevel.TENANT
    assert spec.settings.keywords[0].weight == 1.0
    assert spec.metadata.model_extra == {"author": "someone"}


def test_keyword_weight_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="weight"):
        SkillSpec.model_validate(
            {"name": "a", "description": "d", "metadata": {"genworker": {"keywords": [{"keyword": "k", "weight": 0}]}}}
        )


@pytest.mark.parametrize("mode", ["deterministic", "hybrid"])
def test_deterministic_and_hybrid_need_steps(mode: str) -> None:
    with pytest.raises(ValidationError, match=f"strategy mode '{mode}' needs 'steps'"):
        skill({"mode": mode})
    assert skill({"mode": mode, "steps": [step("a")]}).settings.strategy.steps[0].id == "a"


def test_langgraph_needs_a_graph() -> None:
    with pytest.raises(ValidationError, match="'langgraph' needs 'graph'"):
        skill({"mode": "langgraph"})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"id": "t", "kind": "tool"}, "a tool step needs 'tool'"),
        ({"id": "l", "kind": "llm"}, "an llm step needs 'instructions'"),
        ({"id": "a", "kind": "autonomous"}, "an autonomous step needs 'instructions'"),
        ({"id": "c", "kind": "condition"}, "a condition step needs 'condition'"),
        ({"id": "x", "kind": "dance"}, "kind"),
        ({"id": "bad id", "kind": "llm", "instructions": "i"}, "id"),
    ],
)
def test_step_kinds_need_their_fields(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        skill({"mode": "deterministic", "steps": [bad]})


def test_step_ids_are_unique() -> None:
    with pytest.raises(ValidationError, match=r"strategy\.steps: duplicate id 'a'"):
        skill({"mode": "deterministic", "steps": [step("a"), step("a", "tool")]})


def graph(**fields: Any) -> dict[str, Any]:
    base = {
        "entry": "plan",
        "nodes": [{"name": "plan", "kind": "llm", "instructions": "plan"}, {"name": "act", "kind": "tool"}],
        "edges": [{"from": "plan", "to": "act"}, {"from": "act", "to": "END", "cond": "done"}],
    }
    return {"mode": "langgraph", "graph": {**base, **fields}}


def test_graph_parses_with_from_alias_and_free_node_settings() -> None:
    spec = skill(graph())
    built = spec.settings.strategy.graph
    assert built is not None
    assert [(e.from_, e.to) for e in built.edges] == [("plan", "act"), ("act", "END")]
    assert built.nodes[0].model_extra == {"instructions": "plan"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"edges": [{"from": "plan", "to": "nowhere"}]}, "unknown node 'nowhere'"),
        ({"edges": [{"from": "ghost", "to": "act"}]}, "unknown node 'ghost'"),
        ({"entry": "start"}, "graph.entry 'start' is not a node"),
        ({"nodes": [{"name": "plan", "kind": "llm"}, {"name": "plan", "kind": "tool"}]}, "graph.nodes: duplicate id"),
        ({"nodes": [{"name": "plan", "kind": "sing"}]}, "kind"),
        ({"edges": [{"to": "act"}]}, "from"),
    ],
)
def test_graph_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        skill(graph(**fields))


BODY = """\
Intro text that is not a block.

## instructions.plan
Make a plan.

### Details
Sub-heading stays in the block.

## instructions.reply\x20\x20
Write the reply.
## Notes
Not part of any block.
## instructions.empty
"""


def test_instruction_blocks_parse_until_the_next_h2() -> None:
    blocks = instruction_blocks(BODY)
    assert list(blocks) == ["plan", "reply", "empty"]
    assert blocks["plan"] == "Make a plan.\n\n### Details\nSub-heading stays in the block."
    assert blocks["reply"] == "Write the reply."
    assert blocks["empty"] == ""
    assert instruction_blocks("No blocks here.\n# instructions.top\n") == {}


def test_missing_blocks_from_steps_and_graph_nodes() -> None:
    spec = skill({"mode": "deterministic", "steps": [step("a", instructions="plan"), step("b", instructions="gone")]})
    assert missing_blocks(spec, {"plan": "x"}) == ["gone"]
    assert missing_blocks(spec, {"plan": "x", "gone": "y"}) == []
    assert missing_blocks(skill(graph()), {}) == ["plan"]
    assert missing_blocks(skill(), {}) == []


def test_allowed_tools_accepts_the_agent_skills_space_separated_string() -> None:
    from genworker.workspace.models.skill import SkillSpec

    spec = SkillSpec.model_validate({"name": "x", "description": "d", "allowed-tools": "Bash(git:*) Read"})
    assert spec.allowed_tools == ("Bash(git:*)", "Read")
    listed = SkillSpec.model_validate({"name": "x", "description": "d", "allowed-tools": ["Read", "Write"]})
    assert listed.allowed_tools == ("Read", "Write")
