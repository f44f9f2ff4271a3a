"""Errors of the supervision package."""

from __future__ import annotations

__all__ = ["PolicyError"]


class PolicyError(ValueError):
    """A supervisor policy file that cannot be used; the message names the file and the field."""
