"""Experiments without a server: the protocol's evaluation, the choice of the best only among the
variants that succeeded, when a protocol needs a person's review, and the stored file's version."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.experiments import (
    Experiment,
    ExperimentFileError,
    ExperimentSpec,
    ExperimentStore,
    Protocol,
    RunFacts,
    best,
    evaluate,
)
from genworker.experiments.models import VariantResult

PROTOCOL = Protocol.model_validate(
    {"checks": [{"kind": "contains", "value": "milk"}, {"kind": "max_chars", "value": 20, "required": False}]}
)


def facts(output: str, state: str = "completed", **kw: object) -> RunFacts:
    return RunFacts(state, output, tool_calls=0, tokens=kw.pop("tokens", 10), run_ms=5.0, **kw)  # type: ignore[arg-type]


def result(name: str, f: RunFacts) -> VariantResult:
    return VariantResult(name=name, run_state=f.state, output=f.output, evaluation=evaluate(PROTOCOL, f))


def test_the_best_is_chosen_only_among_variants_that_succeeded() -> None:
    failed = result("failed", facts("milk", state="failed"))  # its checks would all pass
    missed = result("missed", facts("bread"))  # completed, the required check fails
    long = result("long", facts("milk and a great many other things"))
    short = result("short", facts("milk"))
    assert failed.evaluation is not None and failed.evaluation.score == 1.0 and not failed.evaluation.success
    assert best([failed, missed, long, short]) == short
    assert best([failed, missed, long]) == long
    assert best([failed, missed]) is None  # no fake winner


def test_ties_go_to_fewer_supervisor_comments_then_fewer_tokens() -> None:
    comment = {"action": "comment", "check": "model:no_evidence", "reason": "r", "cites": ["c1"], "policy": "p"}
    a = result("a", facts("milk", decisions=(comment,)))
    b = result("b", facts("milk", tokens=50))
    c = result("c", facts("milk", tokens=20))
    assert best([a, b, c]) == c
    assert a.evaluation is not None and a.evaluation.supervisor[0]["cites"] == ["c1"]


def test_a_supervisor_stop_or_pause_fails_the_variant() -> None:
    stop = {"action": "stop", "check": "tool_allow_list", "reason": "r", "cites": ["c1"], "policy": "p"}
    evaluation = evaluate(PROTOCOL, facts("milk", decisions=(stop,)))
    assert not evaluation.success and "tool_allow_list" in evaluation.reason


def test_a_regex_that_does_not_compile_never_passes() -> None:
    protocol = Protocol.model_validate({"checks": [{"kind": "regex", "value": "(unclosed"}]})
    evaluation = evaluate(protocol, facts("(unclosed"))
    assert not evaluation.success and evaluation.checks[0]["passed"] is False


@pytest.mark.parametrize(
    ("protocol", "tiers", "review"),
    [
        ({"origin": "person"}, [None, "strong"], False),
        ({"origin": "model"}, [None, None], True),
        ({"origin": "model", "auto_accept": True}, [None, "fast"], False),  # read-only and cheap
        ({"origin": "model", "auto_accept": True}, [None, "strong"], True),  # not cheap
        ({"origin": "model", "auto_accept": True}, [None] * 4, True),  # too many variants to be cheap
    ],
)
def test_a_model_written_protocol_needs_review_unless_cheap_and_auto_accepted(
    protocol: dict[str, object], tiers: list[str | None], review: bool
) -> None:
    variants = {f"v{n}": {"tier": tier} for n, tier in enumerate(tiers)}
    spec = ExperimentSpec.model_validate({"question": "q", "variants": variants, "protocol": protocol})
    assert spec.needs_review is review


def test_the_store_refuses_another_schema_version_naming_the_file(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate({"question": "q", "variants": {"a": {}, "b": {}}})
    now = datetime.now(UTC)
    experiment = Experiment(
        experiment_id="e1", tenant_id="acme", worker_id="alice", spec=spec, state="running", created_at=now,
        created_by="key:k", updated_at=now,
    )  # fmt: skip
    store = ExperimentStore(tmp_path)
    assert store.create(experiment) and not store.create(experiment)  # an id is taken once
    assert store.get("acme", "alice", "e1") == experiment
    path = store.path("acme", "alice", "e1")
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), "schema_version": 9}), "utf-8")
    with pytest.raises(ExperimentFileError, match=r"e1\.json: schema_version: 9 is not supported"):
        store.get("acme", "alice", "e1")
    assert store.listed("acme", "alice") == []  # left out of the list, not deleted
    assert path.is_file()


def test_integers_are_taken_as_json_schema_has_them_and_variant_names_are_ids() -> None:
    base = {"question": "q", "variants": {"a": {}, "b": {}}}
    spec = ExperimentSpec.model_validate({**base, "max_parallel": 3.0}, strict=True)
    assert spec.max_parallel == 3
    for bad in ({"max_parallel": True}, {"max_parallel": "3"}, {"variants": {"a": {}, "b c": {}}}):
        with pytest.raises(ValueError, match=r"max_parallel|variants"):
            ExperimentSpec.model_validate({**base, **bad}, strict=True)
    names = ExperimentSpec.model_json_schema()["properties"]["variants"]
    assert "patternProperties" not in names and names["propertyNames"]["pattern"].startswith("^[A-Za-z0-9]")
