"""SkillMatcher: explicit > duty hint > keywords (preferred boosted) > persona default > marked default > none."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.worker.skill_matcher import PREFERRED_BOOST, SkillMatch, SkillMatcher, UnknownSkillError
from genworker.workspace.snapshot import Worker

SKILLS = "tenants/acme/workers/w/skills"


def meta(keywords: dict[str, float] | None = None, priority: int = 0, default: bool = False) -> str:
    lines = ["metadata:", "  genworker:", f"    priority: {priority}", f"    default_skill: {str(default).lower()}"]
    if keywords:
        lines.append("    keywords:")
        lines += [f"      - {{keyword: '{k}', weight: {w}}}" for k, w in keywords.items()]
    return "\n".join(lines) + "\n"


class Build:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.persona_extra = ""

    def skill(self, name: str, folder: str = SKILLS, **settings: Any) -> None:
        self.ws.skill(f"{folder}/{name}", extra=meta(**settings))

    def worker(self) -> Worker:
        self.ws.persona(extra=self.persona_extra)
        worker, _ = self.ws.load_worker()
        return worker


@pytest.fixture
def b(ws) -> Build:
    return Build(ws)


def name(match: SkillMatch) -> tuple[str | None, str]:
    return match.skill_id, match.reason


@pytest.fixture
def worker(b) -> Worker:
    b.skill("inbox", keywords={"inbox": 2, "email": 1.5, "unread mail": 1})
    b.skill("report", keywords={"report": 2, "metrics": 1}, priority=5)
    b.skill("api-helper", keywords={"api": 1})
    b.skill("weekly", keywords={"周报": 2, "weekly": 1})
    b.skill("general")
    return b.worker()


matcher = SkillMatcher()


# -- the order -----------------------------------------------------------------------------


def test_explicit_wins_over_everything(worker) -> None:
    match = matcher.match(worker, "check my inbox", skill_id="general", duty_skill_hint="report")
    assert name(match) == ("general", "explicit")
    assert match.scores == {}


def test_unknown_explicit_skill_is_a_client_error(worker) -> None:
    with pytest.raises(UnknownSkillError) as caught:
        matcher.match(worker, "x", skill_id="nope")
    error = caught.value
    assert isinstance(error, LookupError)
    assert (error.skill_id, error.worker_id) == ("nope", "w")
    assert error.available == ("api-helper", "general", "inbox", "report", "weekly")
    assert (
        str(error) == "skill 'nope' is not a skill of worker w; available: api-helper, general, inbox, report, weekly"
    )


def test_the_duty_hint_beats_keywords(worker) -> None:
    assert name(matcher.match(worker, "check my inbox", duty_skill_hint="report")) == ("report", "duty_hint")


def test_an_unknown_duty_hint_falls_through(worker) -> None:
    assert name(matcher.match(worker, "check my inbox", duty_skill_hint="gone")) == ("inbox", "keywords")


def test_keywords_then_persona_default_then_marked_default_then_none(b) -> None:
    b.skill("inbox", keywords={"inbox": 1})
    b.skill("catch-all", default=True)
    b.skill("chosen")
    b.persona_extra = "default_skill: chosen\n"
    worker = b.worker()
    assert name(matcher.match(worker, "my inbox")) == ("inbox", "keywords")
    assert name(matcher.match(worker, "hello")) == ("chosen", "default_skill")
    b.persona_extra = ""
    worker = b.worker()
    assert name(matcher.match(worker, "hello")) == ("catch-all", "fallback")


def test_no_skill_at_all(b) -> None:
    b.skill("inbox", keywords={"inbox": 1})
    match = matcher.match(b.worker(), "hello there")
    assert (match.skill, match.reason, match.skill_id) == (None, "none", None)
    assert match.scores == {}


# -- keyword scoring -----------------------------------------------------------------------


def test_scores_sum_the_weights_of_keywords_found_once_each(worker) -> None:
    match = matcher.match(worker, "Inbox: any EMAIL in the inbox? unread   mail too")
    assert name(match) == ("inbox", "keywords")
    assert match.scores == {"inbox": 4.5}


def test_keywords_weighted_zero_or_less_never_score(b) -> None:
    # upstream files may weigh a keyword 0 (or less); it loads with a warning and never counts
    b.skill("data", keywords={"data": 0, "table": -1, "chart": 1})
    worker = b.worker()
    assert matcher.match(worker, "data table").scores == {}
    assert matcher.match(worker, "data table chart").scores == {"data": 1.0}


def test_keywords_respect_word_boundaries(worker) -> None:
    assert "api-helper" not in matcher.match(worker, "a rapid reply").scores
    assert matcher.match(worker, "call the API, please").scores == {"api-helper": 1.0}
    assert matcher.match(worker, "调用api接口").scores == {"api-helper": 1.0}  # no spaces around it in Chinese
    assert "inbox" not in matcher.match(worker, "inboxes and emails").scores


def test_keywords_in_scripts_without_spaces_match_inside_text(worker) -> None:
    assert name(matcher.match(worker, "请帮我写本周周报")) == ("weekly", "keywords")


def test_the_highest_score_wins(worker) -> None:
    match = matcher.match(worker, "weekly metrics report")
    assert match.scores == {"report": 3.0, "weekly": 1.0}
    assert name(match) == ("report", "keywords")


# -- preference and ties -------------------------------------------------------------------


def test_preferred_skills_get_a_boost(worker) -> None:
    text = "the weekly report"  # report 2, weekly 1
    assert name(matcher.match(worker, text)) == ("report", "keywords")
    match = matcher.match(worker, text, preferred_skill_ids=("weekly",))
    assert match.scores == {"report": 2.0, "weekly": 1.0 + PREFERRED_BOOST}
    assert name(match) == ("weekly", "keywords")  # 2.0 ties 2.0: the preferred skill wins the tie


def test_a_strong_keyword_match_beats_a_preference(worker) -> None:
    match = matcher.match(worker, "metrics report", preferred_skill_ids=("weekly",))
    assert name(match) == ("report", "keywords")


def test_a_preferred_skill_with_no_keyword_hit(worker) -> None:
    match = matcher.match(worker, "hello", preferred_skill_ids=("missing", "general"))
    assert name(match) == ("general", "preferred")
    assert match.scores == {"general": PREFERRED_BOOST}


def test_without_a_boost_preferences_only_break_ties(b) -> None:
    b.skill("a-one", keywords={"plan": 1})
    b.skill("b-two", keywords={"plan": 1})
    worker = b.worker()
    plain = SkillMatcher(preferred_boost=0)
    assert name(plain.match(worker, "plan it")) == ("a-one", "keywords")
    assert name(plain.match(worker, "plan it", preferred_skill_ids=("b-two",))) == ("b-two", "keywords")
    assert name(plain.match(worker, "hello", preferred_skill_ids=("b-two",))) == (None, "none")


def test_priority_breaks_remaining_ties_then_preference_order_then_name(b) -> None:
    b.skill("alpha", keywords={"plan": 1})
    b.skill("beta", keywords={"plan": 1}, priority=3)
    b.skill("gamma", keywords={"plan": 1})
    b.skill("delta", keywords={"plan": 1})
    worker = b.worker()
    assert name(matcher.match(worker, "plan")) == ("beta", "keywords")
    assert name(matcher.match(worker, "plan", preferred_skill_ids=("gamma", "delta"))) == ("gamma", "keywords")
    assert name(matcher.match(worker, "plan", preferred_skill_ids=("delta", "gamma"))) == ("delta", "keywords")
    assert name(matcher.match(worker, "plan", preferred_skill_ids=("alpha", "beta"))) == ("beta", "keywords")


def test_marked_defaults_by_priority_then_level_then_name(b, ws) -> None:
    ws.tenant("acme")
    b.skill("zz-worker", default=True)
    b.skill("aa-tenant", folder="tenants/acme/skills", default=True)
    ws.persona()
    worker = ws.registry(product_skills=None).worker("acme", "w")
    assert {s.name: s.level.value for s in worker.skills.values()} == {"zz-worker": "worker", "aa-tenant": "tenant"}
    assert name(matcher.match(worker, "hi")) == ("zz-worker", "fallback")  # the worker's own level first
    b.skill("mm-urgent", folder="tenants/acme/skills", default=True, priority=9)
    worker = ws.registry(product_skills=None).worker("acme", "w")
    assert name(matcher.match(worker, "hi")) == ("mm-urgent", "fallback")


def test_matching_is_deterministic(worker) -> None:
    results = {name(matcher.match(worker, "inbox report api weekly")) for _ in range(5)}
    assert len(results) == 1
