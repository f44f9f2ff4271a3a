"""Committing one edited workspace file to the git repository the workspace lives in, if any, and
running git for it (and for the git sensor).

git runs without a shell, reading the repository's own config but neither the system's nor the
server account's (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), with the author given on
its command line (`-c user.name= -c user.email=`). A commit names only the edited path (`commit
--only`): whatever else is staged stays staged and out of the commit. A new file is first added
as intent-to-add, and taken out of the index again when the commit fails, so a failed save leaves
the index as it found it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GIT_TIMEOUT_S", "Author", "GitError", "commit_file", "git_env", "is_ignored", "repository_of", "run_git"]

GIT_TIMEOUT_S = 60.0  # a commit runs the repository's hooks


class GitError(Exception):
    """git refused or failed; the message is git's own last line."""


@dataclass(frozen=True, slots=True)
class Author:
    name: str
    email: str


def repository_of(path: Path) -> Path | None:
    """The top folder of the work tree `path` (a folder) is in; None when it is in none."""
    done = run_git(path, "rev-parse", "--show-toplevel", ok=(0, 128))
    if done.returncode == 0:
        return Path(done.stdout.strip()).resolve()
    if "not a git repository" in done.stderr:
        return None
    raise GitError(_last_line(done))  # e.g. a repository owned by another user ("dubious ownership")


def is_ignored(top: Path, rel: str) -> bool:
    """Whether git ignores `rel` (relative to `top`) and does not track it."""
    if run_git(top, "ls-files", "--error-unmatch", "--", rel, ok=(0, 1)).returncode == 0:
        return False
    return run_git(top, "check-ignore", "-q", "--", rel, ok=(0, 1)).returncode == 0


def commit_file(top: Path, rel: str, author: Author, message: str) -> str:
    """Commit the work tree's `rel` (relative to `top`) alone, as `author`; the new commit's sha."""
    tracked = run_git(top, "ls-files", "--error-unmatch", "--", rel, ok=(0, 1)).returncode == 0
    if not tracked:
        run_git(top, "add", "--intent-to-add", "--", rel)
    identity = ("-c", f"user.name={author.name}", "-c", f"user.email={author.email}")
    try:
        run_git(top, *identity, "commit", "--quiet", "--only", "--file=-", "--", rel, stdin=message)
    except GitError:
        if not tracked:
            run_git(top, "rm", "--cached", "--quiet", "--", rel, ok=(0, 128))
        raise
    return run_git(top, "rev-parse", "HEAD").stdout.strip()


def run_git(
    cwd: Path, *args: str, ok: tuple[int, ...] = (0,), stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`git -C cwd args`; GitError unless its exit status is in `ok` (git's last line of output says why)."""
    command = ["git", "--no-pager", "-C", str(cwd), *args]  # paths hold no glob characters (EDITABLE_PATTERN)
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            env=git_env(),
            timeout=GIT_TIMEOUT_S,
            check=False,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise GitError("git is not installed (no `git` on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {_verb(args)} took longer than {GIT_TIMEOUT_S:.0f}s") from None
    if done.returncode not in ok:
        raise GitError(f"git {_verb(args)} failed ({done.returncode}): {_last_line(done)}")
    return done


def _verb(args: tuple[str, ...]) -> str:
    return next((a for a in args if not a.startswith("-") and "=" not in a), "")


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def git_env() -> dict[str, str]:
    """No credentials, and no GIT_* of the server's environment (GIT_DIR, GIT_AUTHOR_NAME ... would
    redirect or rename a commit)."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
    }
