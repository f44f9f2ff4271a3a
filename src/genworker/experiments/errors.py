"""The experiments package's errors: misuse (a spec that names what the worker lacks), an unknown
experiment, a change its state does not allow, and a stored file that cannot be read."""

from __future__ import annotations

__all__ = ["ExperimentConflict", "ExperimentError", "ExperimentFileError", "ExperimentNotFound", "SpecError"]


class ExperimentError(Exception):
    """Base of the package's errors."""


class SpecError(ExperimentError):
    """The experiment as asked for cannot run on this worker: `field: problem`."""


class ExperimentNotFound(ExperimentError, LookupError):
    def __init__(self, experiment_id: str) -> None:
        self.experiment_id = experiment_id
        super().__init__(f"no experiment {experiment_id!r}")


class ExperimentConflict(ExperimentError):
    """The experiment's state does not allow it (already exists, started, waiting for its review ...);
    `code` says which."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class ExperimentFileError(ExperimentError):
    """A stored experiment file with an unknown schema_version or a bad field (`file: field: problem`)."""
