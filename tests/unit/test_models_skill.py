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


@pytest.mark.parametrize("name", ["a", "web-search", "x" * 64, "Web", "web_search", "数据分析", "web search"])
def test_skill_names_are_any_short_text(name: str) -> None:
    assert skill(name=name).name == name


@pytest.mark.parametrize("name", ["a/b", "..\\x", "tab\there", "x" * 65, "", "  "])
def test_skill_names_that_could_be_paths_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        skill(name=name)


def test_description_is_optional_but_bounded() -> None:
    assert SkillSpec.model_validate({"name": "x"}).description == ""
    with pytest.raises(ValidationError, match="description"):
        skill(description="x" * 1025)


def test_upstream_legacy_format_moves_top_level_settings_under_genworker() -> None:
    spec = SkillSpec.model_validate(
        {
            "skill_id": "lookup",
            "scope": "worker",
            "priority": 3,
            "keywords": ["find", {"keyword": "search", "weight": 2}],
            "recommended_tools": ["web_search"],
            "metadata": {"genworker": {"priority": 7}},  # the genworker block wins
        }
    )
    assert spec.name == "lookup"
    assert (spec.settings.scope, spec.settings.priority) == (SkillLevel.WORKER, 7)
    assert [(k.keyword, k.weight) for k in spec.settings.keywords] == [("find", 1.0), ("search", 2.0)]
    assert spec.settings.recommended_tools == ("web_search",)
    assert spec.model_extra == {}


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


def test_keyword_weight_zero_loads_as_upstream() -> None:
    spec = SkillSpec.model_validate(
        {"name": "a", "metadata": {"genworker": {"keywords": [{"keyword": "k", "weight": 0}]}}}
    )
    assert spec.settings.keywords[0].weight == 0  # the loader warns that it never scores


@pytest.mark.parametrize("mode", ["deterministic", "hybrid"])
def test_deterministic_and_hybrid_load_without_steps(mode: str) -> None:
    assert skill({"mode": mode}).settings.strategy.steps == ()  # the loader warns; a run uses the fallback
    assert skill({"mode": mode, "steps": [step("a")]}).settings.strategy.steps[0].id == "a"


@pytest.mark.parametrize(("written", "mode"), [("Hybrid", "hybrid"), ("reactive", "autonomous"), (None, "autonomous")])
def test_strategy_mode_case_and_unknown_modes(written: str | None, mode: str) -> None:
    strategy = {} if written is None else {"mode": written}
    assert skill(strategy).settings.strategy.mode == StrategyMode(mode)


def test_upstream_workflow_steps_map_to_ours() -> None:
    strategy = skill(
        {
            "mode": "hybrid",
            "fallback": {"mode": "Autonomous"},
            "workflow": [
                {"step": "plan", "type": "autonomous", "instruction_ref": "plan", "max_rounds": 3, "tools": ["a"]},
                {
                    "step": "run",
                    "type": "Deterministic",
                    "tools": ["a", "b"],
                    "retry": {"max_attempts": 2, "backoff": "Exponential"},
                },
                {"type": "deterministic"},
            ],
        }
    ).settings.strategy
    plan, run, third = strategy.steps
    assert (plan.id, plan.kind, plan.instructions, plan.max_rounds, plan.tools) == (
        "plan",
        "autonomous",
        "plan",
        3,
        ("a",),
    )
    assert (run.kind, run.instructions, run.tools, run.retry.max_attempts, run.retry.backoff) == (
        "llm", "general", ("a", "b"), 2, "exponential",
    )  # fmt: skip
    assert (third.id, third.tools) == ("step-3", ("*",))  # a deterministic step without tools is offered every tool
    assert strategy.fallback is not None and (strategy.fallback.condition, strategy.fallback.mode) == ("", "autonomous")


def test_in_deterministic_mode_every_upstream_step_is_one_model_call() -> None:
    steps = skill({"mode": "deterministic", "workflow": [{"step": "a", "type": "autonomous"}]}).settings.strategy.steps
    assert [(s.kind, s.tools) for s in steps] == [("llm", ("*",))]


def test_workflow_and_steps_in_one_strategy_are_refused() -> None:
    with pytest.raises(ValidationError, match="either as 'workflow'"):
        skill({"mode": "hybrid", "workflow": [{"step": "a"}], "steps": [step("b")]})


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
        ({"id": "bad/id", "kind": "llm", "instructions": "i"}, "id"),
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


def test_upstream_graph_spellings() -> None:
    built = skill(
        graph(
            nodes=[{"name": "plan", "kind": "LLM", "instruction_ref": "plan"}, {"name": "act", "kind": "python"}],
            edges=[{"from_node": "plan", "to_node": "act"}],
            max_steps=25,
        )
    ).settings.strategy.graph
    assert built is not None and built.max_steps == 25
    assert [n.kind for n in built.nodes] == ["llm", "python"]
    assert [(e.from_, e.to) for e in built.edges] == [("plan", "act")]
    with pytest.raises(ValidationError, match="either 'from' or 'from_node'"):
        skill(graph(edges=[{"from": "plan", "from_node": "plan", "to": "act"}]))


def test_python_graph() -> None:
    python = {"module": "workspace.tenants.t.skills.g.graph", "factory": "build", "state_schema_ref": "S"}
    built = skill({"mode": "langgraph", "graph": python}).settings.strategy.graph
    assert built is not None and built.is_python and (built.module, built.factory) == (python["module"], "build")
    with pytest.raises(ValidationError, match="not both"):
        skill(graph(module="workspace.x", factory="f"))
    with pytest.raises(ValidationError, match="needs both 'module' and 'factory'"):
        skill({"mode": "langgraph", "graph": {"module": "workspace.x"}})
    with pytest.raises(ValidationError, match="not a dotted module path"):
        skill({"mode": "langgraph", "graph": {"module": "../x", "factory": "f"}})


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


def test_instruction_blocks_run_to_the_next_instructions_heading() -> None:
    # upstream's rule: other headings belong to the block; text before the first heading is `general`
    blocks = instruction_blocks(BODY)
    assert list(blocks) == ["general", "plan", "reply"]  # an empty block is left out
    assert blocks["general"] == "Intro text that is not a block."
    assert blocks["plan"] == "Make a plan.\n\n### Details\nSub-heading stays in the block."
    assert blocks["reply"] == "Write the reply.\n## Notes\nNot part of any block."
    assert instruction_blocks("No blocks here.\n# instructions.top\n") == {
        "general": "No blocks here.\n# instructions.top"
    }
    assert instruction_blocks("## instructions.report.summary\nThree bullets.") == {"report.summary": "Three bullets."}
    assert instruction_blocks("") == {}


def test_missing_blocks_from_steps_and_graph_nodes() -> None:
    spec = skill({"mode": "deterministic", "steps": [step("a", instructions="plan"), step("b", instructions="gone")]})
    assert missing_blocks(spec, {"plan": "x"}) == ["gone"]
    assert missing_blocks(spec, {"plan": "x", "gone": "y"}) == []
    assert missing_blocks(skill(graph()), {}) == ["plan"]
    upstream_nodes = [
        {"name": "plan", "kind": "llm", "instruction_ref": "p"},
        {"name": "act", "kind": "interrupt", "prompt_ref": "q"},
    ]
    assert missing_blocks(skill(graph(nodes=upstream_nodes)), {"p": "x"}) == ["q"]
    assert missing_blocks(skill(), {}) == []


def test_allowed_tools_accepts_the_agent_skills_space_separated_string() -> None:
    from genworker.workspace.models.skill import SkillSpec

    spec = SkillSpec.model_validate({"name": "x", "description": "d", "allowed-tools": "Bash(git:*) Read"})
    assert spec.allowed_tools == ("Bash(git:*)", "Read")
    listed = SkillSpec.model_validate({"name": "x", "description": "d", "allowed-tools": ["Read", "Write"]})
    assert listed.allowed_tools == ("Read", "Write")
