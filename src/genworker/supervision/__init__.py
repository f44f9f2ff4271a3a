"""The Supervisor (seed §2.2, §6.3, issue #33): a policy attached to a conversation, a duty's runs or
an experiment watches each run beside the engine. Deterministic checks may block a tool call, pause
or stop the run; a cheap model reviewer only comments or asks a person to look (a confirmation)."""

from genworker.supervision.decisions import Action, Decision, SupervisorState, advance
from genworker.supervision.errors import PolicyError
from genworker.supervision.policy import SupervisorPolicy, load_policies
from genworker.supervision.service import Supervision

__all__ = [
    "Action",
    "Decision",
    "PolicyError",
    "Supervision",
    "SupervisorPolicy",
    "SupervisorState",
    "advance",
    "load_policies",
]
