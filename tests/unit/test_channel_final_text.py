"""The IM answer owed for a run that ended without a plain completion: a supervisor's pause or stop
says what the supervisor did (the engine's text), never the generic failure sentence."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from genworker.channels.ingest.processor import FAILURE_TEXT, _final_text
from genworker.engine.base import RunResult
from genworker.worker.routing import RouteDone
from genworker.worker.task import RunRecord

RECORD = cast(RunRecord, SimpleNamespace(run_id="run_1"))  # only its id is read (in a log line)
PAUSED = "paused by supervisor 'careful' (tool_allow_list): tool 'file_read' is not in the policy's tools"


@pytest.mark.parametrize("status", ["supervisor_paused", "supervisor_stopped"])
def test_a_supervisors_pause_or_stop_is_answered_with_what_it_did(status: str) -> None:
    done = RouteDone(RunResult(status, PAUSED, "react", error=PAUSED), RECORD)  # type: ignore[arg-type]
    assert _final_text(done, None) == PAUSED


def test_a_failure_is_answered_with_the_failure_sentence() -> None:
    done = RouteDone(RunResult("failed", "", "react", "provider_error", "x"), RECORD)
    assert _final_text(done, None) == FAILURE_TEXT
