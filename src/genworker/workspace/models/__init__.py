"""Immutable models of every workspace file."""

from genworker.workspace.models.contact import Contact, ContactIdentity
from genworker.workspace.models.credentials import ChannelCredentials
from genworker.workspace.models.duty import DutyContract, DutySpec, DutyStatus, Trigger
from genworker.workspace.models.goal import Goal, GoalStatus, GoalTask, Milestone
from genworker.workspace.models.persona import PersonaSpec, WorkerMode
from genworker.workspace.models.rule import Rule
from genworker.workspace.models.skill import SkillLevel, SkillSpec, Strategy, StrategyMode
from genworker.workspace.models.tenant import Tenant

__all__ = [
    "ChannelCredentials",
    "Contact",
    "ContactIdentity",
    "DutyContract",
    "DutySpec",
    "DutyStatus",
    "Goal",
    "GoalStatus",
    "GoalTask",
    "Milestone",
    "PersonaSpec",
    "Rule",
    "SkillLevel",
    "SkillSpec",
    "Strategy",
    "StrategyMode",
    "Tenant",
    "Trigger",
    "WorkerMode",
]
