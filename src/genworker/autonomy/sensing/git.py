"""The git sensor: new commits, branches and tags of a local repository, through the `git` CLI.

The cursor keeps the last seen sha of every branch and tag. Each poll lists the refs and, for a
branch that moved, reports `git rev-list --topo-order --reverse old..new` as `git.commit` facts
(oldest first). Past `max_commits` per branch and poll, only the newest ones are reported, after a
`git.commits_truncated` fact that counts the rest. A branch whose old sha is not an ancestor of
the new one was rewritten (force-push): `git.branch_rewritten`, then the commits not reachable from
the old sha. New branches and tags are reported once, not their history. With `filter.paths`, only
commits that touch those paths are reported.

git runs through genworker.workspace.git.run_git: without a shell, with an environment that carries
no credentials and reads neither the system nor the global git config; it never fetches.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genworker.autonomy.sensing.base import Clock, Observation, PullSensor, confined_path, utc_now
from genworker.autonomy.sensing.cursors import Cursor, CursorStore
from genworker.autonomy.sensing.errors import SensorConfigError, SensorPollError
from genworker.autonomy.sensing.facts import Fact, FactEmitter
from genworker.autonomy.sensing.filters import GitFilter
from genworker.ids import is_inside
from genworker.workspace.git import GitError, run_git
from genworker.workspace.models.persona import SensorConfig

__all__ = ["GitCommit", "GitRefs", "GitRepo", "GitSensor"]

_SEP = "\x1f"


@dataclass(frozen=True, slots=True)
class GitRefs:
    branches: Mapping[str, str]  # name -> commit sha
    tags: Mapping[str, tuple[str, str]]  # name -> (tag object sha, peeled commit sha)


@dataclass(frozen=True, slots=True)
class GitCommit:
    sha: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    authored_at: str
    subject: str


class GitRepo:
    """Read-only queries on one local repository."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        try:
            return run_git(self.path, "-c", "core.fsmonitor=false", *args, ok=ok)
        except GitError as exc:
            raise SensorPollError(str(exc)) from None

    def storage(self) -> list[Path]:
        """Every folder git reads objects and refs from: the git dir, the common dir, alternates."""
        out = self._run("rev-parse", "--absolute-git-dir", "--git-common-dir").stdout.splitlines()
        folders = [Path(out[0]), (self.path / out[1]) if len(out) > 1 else Path(out[0])]
        for base in folders[1:]:
            alternates = base / "objects" / "info" / "alternates"
            if alternates.is_file():
                for line in alternates.read_text(encoding="utf-8", errors="replace").splitlines():
                    if line.strip() and not line.startswith("#"):
                        folders.append((base / "objects" / line.strip()).resolve())
        return folders

    def refs(self) -> GitRefs:
        fmt = f"%(refname){_SEP}%(objectname){_SEP}%(*objectname)"
        out = self._run("for-each-ref", f"--format={fmt}", "refs/heads", "refs/tags").stdout
        branches: dict[str, str] = {}
        tags: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            ref, sha, peeled = line.split(_SEP)
            if ref.startswith("refs/heads/"):
                branches[ref.removeprefix("refs/heads/")] = sha
            elif ref.startswith("refs/tags/"):
                tags[ref.removeprefix("refs/tags/")] = (sha, peeled or sha)
        return GitRefs(branches, tags)

    def has_commit(self, sha: str) -> bool:
        return self._run("cat-file", "-e", f"{sha}^{{commit}}", ok=(0, 1, 128)).returncode == 0

    def is_ancestor(self, old: str, new: str) -> bool:
        return self._run("merge-base", "--is-ancestor", old, new, ok=(0, 1)).returncode == 0

    def commits(self, new: str, old: str | None, paths: tuple[str, ...] = ()) -> list[GitCommit]:
        """Commits reachable from `new` but not from `old`, parents before children; with `paths`
        (glob pathspecs), only those that touch them."""
        fmt = _SEP.join(["%H", "%P", "%an", "%ae", "%aI", "%s"])
        args = ["rev-list", "--no-commit-header", "--topo-order", "--reverse", f"--format={fmt}", new]
        if old is not None:
            args.append(f"^{old}")
        if paths:
            args.extend(["--", *(f":(glob){p}" for p in paths)])
        commits = []
        for line in self._run(*args).stdout.splitlines():
            sha, parents, name, email, date, subject = line.split(_SEP, 5)
            commits.append(GitCommit(sha, tuple(parents.split()), name, email, date, subject))
        return commits


class GitSensor(PullSensor):
    def __init__(
        self,
        config: SensorConfig,
        emitter: FactEmitter,
        cursors: CursorStore,
        clock: Clock = utc_now,
        *,
        sensor_filter: GitFilter,
        limit: Path,
    ) -> None:
        super().__init__(config, emitter, cursors, clock)
        self.filter = sensor_filter
        self.limit = limit
        self.repo_path()

    def repo_path(self) -> Path:
        return confined_path(self.cursors.worker_dir, self.filter.repo, self.limit, "filter.repo")

    def scope(self) -> str:
        return f"repo={self.filter.repo}"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        path = self.repo_path()
        if not path.is_dir():
            raise SensorPollError(f"repository {self.filter.repo!r} does not exist under the worker folder")
        repo = GitRepo(path)
        for folder in repo.storage():  # a .git file or alternates must not reach outside the tenant
            if not is_inside(self.limit, folder):
                raise SensorConfigError(f"repository {self.filter.repo!r} keeps its data outside the tenant folder")
        refs = repo.refs()
        state: dict[str, Any] = {
            "branches": dict(sorted(refs.branches.items())),
            "tags": {name: sha for name, (sha, _) in sorted(refs.tags.items())},
        }
        if previous is None and self.filter.on_first_poll == "baseline":
            return Observation((), state)
        old_branches = _str_map(previous.state.get("branches")) if previous else {}
        old_tags = _str_map(previous.state.get("tags")) if previous else {}
        facts: list[Fact] = []
        for branch in sorted(old_branches.keys() | refs.branches.keys()):
            if not self.filter.branch_allowed(branch):
                continue
            self._branch(repo, branch, old_branches.get(branch), refs.branches.get(branch), seq, facts)
        if self.filter.tags:
            facts.extend(_tag_facts(old_tags, refs.tags, seq))
        return Observation(tuple(facts), state)

    def _branch(
        self, repo: GitRepo, branch: str, old: str | None, new: str | None, seq: int, facts: list[Fact]
    ) -> None:
        """Append the facts of one branch that went from `old` to `new` (None: absent)."""
        if new is None:
            facts.append(Fact("git.branch_deleted", {"branch": branch, "sha": old}, f"{seq}:branch_deleted:{branch}"))
            return
        if old is None:
            facts.append(Fact("git.branch_created", {"branch": branch, "sha": new}, f"{seq}:branch_created:{branch}"))
            return
        if old == new:
            return
        since: str | None = old if repo.has_commit(old) else None  # None: the old sha was garbage-collected
        if since is None or not repo.is_ancestor(since, new):
            payload = {"branch": branch, "old_sha": old, "new_sha": new, "old_sha_missing": since is None}
            facts.append(Fact("git.branch_rewritten", payload, f"{seq}:branch_rewritten:{branch}:{old}:{new}"))
            if since is None:  # the old history is gone: nothing to diff against
                return
        commits = repo.commits(new, since, self.filter.paths)
        shown = commits[-self.filter.max_commits :]
        if len(shown) < len(commits):
            payload = {"branch": branch, "old_sha": old, "new_sha": new, "total": len(commits), "reported": len(shown)}
            facts.append(Fact("git.commits_truncated", payload, f"commits_truncated:{branch}:{old}:{new}"))
        facts.extend(_commit_fact(branch, commit) for commit in shown)


def _commit_fact(branch: str, commit: GitCommit) -> Fact:
    payload = {
        "branch": branch,
        "sha": commit.sha,
        "parents": list(commit.parents),
        "author_name": commit.author_name,
        "author_email": commit.author_email,
        "authored_at": commit.authored_at,
        "subject": commit.subject,
    }
    return Fact("git.commit", payload, f"commit:{branch}:{commit.sha}")


def _tag_facts(old: Mapping[str, str], new: Mapping[str, tuple[str, str]], seq: int) -> list[Fact]:
    facts = []
    for tag in sorted(old.keys() | new.keys()):
        before, after = old.get(tag), new.get(tag)
        if after is None:
            facts.append(Fact("git.tag_deleted", {"tag": tag, "sha": before}, f"{seq}:tag_deleted:{tag}"))
        elif before is None:
            payload = {"tag": tag, "sha": after[0], "commit": after[1]}
            facts.append(Fact("git.tag_created", payload, f"{seq}:tag_created:{tag}:{after[0]}"))
        elif before != after[0]:
            payload = {"tag": tag, "old_sha": before, "sha": after[0], "commit": after[1]}
            facts.append(Fact("git.tag_moved", payload, f"{seq}:tag_moved:{tag}:{after[0]}"))
    return facts


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}
