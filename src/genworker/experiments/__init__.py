"""Experiments (seed §9, issue #33): one question tried by several isolated variants (skill, model
tier, instructions, tool set), each measured by one protocol; the best is chosen only among the
variants that succeeded, and becomes a candidate version, never production (docs/experiments.md)."""

from genworker.experiments.errors import (
    ExperimentConflict,
    ExperimentError,
    ExperimentFileError,
    ExperimentNotFound,
    SpecError,
)
from genworker.experiments.evaluation import RunFacts, best, evaluate
from genworker.experiments.models import Experiment, ExperimentSpec, Protocol, Variant
from genworker.experiments.service import ExperimentService
from genworker.experiments.store import ExperimentStore

__all__ = [
    "Experiment",
    "ExperimentConflict",
    "ExperimentError",
    "ExperimentFileError",
    "ExperimentNotFound",
    "ExperimentService",
    "ExperimentSpec",
    "ExperimentStore",
    "Protocol",
    "RunFacts",
    "SpecError",
    "Variant",
    "best",
    "evaluate",
]
