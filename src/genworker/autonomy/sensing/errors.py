"""What can go wrong with a sensor: a misconfiguration (fix the workspace) or a failed poll (retried)."""

from __future__ import annotations

__all__ = ["CursorError", "SensorBusy", "SensorConfigError", "SensorError", "SensorPollError"]


class SensorError(Exception):
    """Base of the sensing errors; the message is what the sensor status shows."""


class SensorConfigError(SensorError):
    """A sensor config (its filter, a path, missing credentials) cannot work; names the sensor and field."""


class SensorPollError(SensorError):
    """One poll failed (source unreachable, command failed); the cursor did not move, the next poll retries."""


class CursorError(SensorError):
    """A stored cursor is unreadable or of an unknown schema_version; the file is left untouched."""


class SensorBusy(SensorError):
    """Another runtime process is polling this sensor now (it owned the worker until a moment ago);
    nothing was read: the next poll starts from the cursor that one saves."""
