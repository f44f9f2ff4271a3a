"""Identifiers that end up in file paths, and the only way to turn them into paths; and the
`match_key` a WAITING plan waits on (stored as a path hash and a Redis key).

Every tenant, worker, skill, duty, goal, session and thread id is checked against one
strict pattern before it touches the filesystem; `safe_join` also refuses paths that
resolve (through symlinks) outside the root they were joined under.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

__all__ = [
    "ID_PATTERN",
    "InvalidIdError",
    "PathEscapeError",
    "PlainFolders",
    "is_inside",
    "plainly_under",
    "safe_join",
    "validate_id",
    "validate_match_key",
]

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_MATCH_KEY = re.compile(r"^[A-Za-z0-9_.\-/#@]+(:[A-Za-z0-9_.\-/#@]+)+$")


class InvalidIdError(ValueError):
    """An id is not safe to use as a path component."""


class PathEscapeError(ValueError):
    """A path resolves outside the root it must stay in."""


def validate_id(value: object, kind: str = "id") -> str:
    if not isinstance(value, str):
        raise InvalidIdError(f"{kind} must be a string, got {type(value).__name__}")
    if not ID_PATTERN.fullmatch(value) or ".." in value:
        raise InvalidIdError(
            f"{kind} {value!r} is not a valid id: use 1-128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit, with no '..'"
        )
    return value


def validate_match_key(value: object) -> str:
    """`source:kind:id:change` words, e.g. 'github:issue:42:updated' (at least two, no spaces)."""
    if not isinstance(value, str) or len(value) > 256 or not _MATCH_KEY.fullmatch(value):
        raise ValueError(
            f"match_key {value!r} is not valid: use ':'-separated words of letters, digits and _.-/#@, "
            "e.g. 'github:issue:42:updated' (at most 256 characters)"
        )
    return value


def is_inside(root: Path, path: Path) -> bool:
    """True when `path`, with symlinks resolved, stays under `root` (also resolved).

    A path that cannot be resolved (a symlink loop) is not inside anything.
    """
    if plainly_under(root, path):
        return True
    try:
        real_root = root.resolve()
        real = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: symlink loop (Python < 3.13)
        return False
    return real == real_root or real_root in real.parents


def plainly_under(root: Path, path: Path) -> bool:
    """`path` is written under `root` without `..` and none of its parts below `root` is a symlink:
    then it is inside without resolving either path (one lstat per part instead of two realpaths)."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    if ".." in parts:
        return False
    current = root
    for part in parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True  # nothing below a missing part exists, so nothing there is a link
        except OSError:
            return False
    return True


def safe_join(root: Path, *ids: str, kind: str = "id") -> Path:
    """Join validated ids under `root`; refuse anything that escapes it."""
    path, linked = root, False
    for part in ids:
        path = path / validate_id(part, kind)
        linked = linked or path.is_symlink()
    # Valid ids hold no separator and no `..`: without a symlink among them the path is under `root`
    # as written (one lstat per id instead of resolving both paths); with one, resolve and check.
    if linked and not is_inside(root, path):
        raise PathEscapeError(f"{path} resolves outside {root}")
    return path


class PlainFolders:
    """Folders found free of symlinks below a root, remembered for the process (bounded), so a file in
    one costs one `lstat` of the file itself instead of a walk from the root (a store's run, manifest
    or session path). Only the workspace's owner can turn such a folder into a symlink
    afterwards: tools are confined to a worker's `files/`."""

    def __init__(self, limit: int = 65_536) -> None:
        self._known: set[Path] = set()
        self._limit = limit

    def file(self, root: Path, folder: Path, name: str) -> Path:
        """`folder/name`, refused when it resolves outside `root` (`name` is already validated)."""
        path = folder / name
        if folder in self._known:
            try:
                plain = not stat.S_ISLNK(os.lstat(path).st_mode)
            except FileNotFoundError:
                plain = True
            if plain or is_inside(root, path):
                return path
            raise PathEscapeError(f"{path} resolves outside {root}")
        if not is_inside(root, path):
            raise PathEscapeError(f"{path} resolves outside {root}")
        if len(self._known) < self._limit and plainly_under(root, folder) and folder.is_dir():
            self._known.add(folder)
        return path
