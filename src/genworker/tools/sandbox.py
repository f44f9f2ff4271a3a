"""Running untrusted commands: the one way bash, execute_code, script tools and pre_scripts start a process.

Layers, outermost first (docs/sandbox.md):

* **bubblewrap** when it is installed and a probe run works: a fresh mount namespace holding only the
  system folders (read-only) and the call's cwd (read-write), no network, its own pid namespace.
* **a private uid** when the server runs as root: every call runs as a uid leased from a pool, alone on
  it, so RLIMIT_NPROC stops fork bombs (it is not enforced for root), nothing can signal, ptrace or read
  /proc of another run, and a sweep (`kill(-1)` as that uid) leaves no process behind.
* **rlimits** always: CPU, address space, file size, open files, processes, no core files.

Plus a scrubbed environment, a new session (the whole tree is killed on timeout), capped output read
as it arrives, and a wall timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

from genworker.ids import validate_id
from genworker.tools.context import ToolScope

__all__ = [
    "DEFAULT_LIMITS",
    "Isolation",
    "IsolationChoice",
    "SandboxError",
    "SandboxHost",
    "SandboxLimits",
    "SandboxResult",
    "configure_sandbox",
    "prepare_scratch",
    "run_sandboxed",
    "sandbox_python",
    "sandbox_status",
]

Isolation = Literal["bwrap", "rlimits+uid", "rlimits"]
IsolationChoice = Literal["auto", "bwrap", "rlimits"]

log = logging.getLogger("genworker.sandbox")

_MIB = 1024 * 1024
_PATH = "/usr/local/bin:/usr/bin:/bin"
_BWRAP_PROCESSES = 2  # unprivileged bwrap's own process and its pid-namespace init
_DRAIN_GRACE_S = 2.0  # after the process is gone, how long its pipes may stay open
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/alternatives",
    "/etc/group",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
)


class SandboxError(RuntimeError):
    """The sandbox could not be set up (not: the command failed — that is a SandboxResult)."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    wall_timeout_s: float = 30.0
    cpu_s: int = 10  # RLIMIT_CPU: SIGXCPU at cpu_s, SIGKILL one second later
    memory_bytes: int = 512 * _MIB  # RLIMIT_AS
    file_size_bytes: int = 16 * _MIB  # RLIMIT_FSIZE, per file
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 32  # RLIMIT_NPROC: processes and threads of the sandbox uid
    output_bytes: int = 128 * 1024  # per stream; more kills the command (truncated=True)

    def for_call(self, requested_s: float | None, budget_s: float | None = None) -> SandboxLimits:
        """These limits with the wall timeout a call asked for, never above the configured one, and
        ending a second before `budget_s` (the pipeline's own timeout) so the call can report."""
        wall = self.wall_timeout_s
        if requested_s is not None and requested_s > 0:
            wall = min(wall, requested_s)
        if budget_s is not None:
            wall = min(wall, max(budget_s - 1.0, 1.0))
        return replace(self, wall_timeout_s=wall)


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True, slots=True)
class SandboxResult:
    exit_code: int | None  # None when killed by a signal
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    killed_by_signal: int | None
    isolation: Isolation = "rlimits"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.truncated

    def problem(self) -> str | None:
        """Why the run did not succeed, in words; None when it did."""
        if self.timed_out:
            return "timed out (wall clock)"
        if self.truncated:
            return "output limit exceeded; the command was stopped"
        if self.killed_by_signal is not None:
            return f"killed by signal {_signal_name(self.killed_by_signal)}"
        if self.exit_code:
            return f"exit code {self.exit_code}"
        return None

    def report(self) -> str:
        """stdout, stderr and what went wrong, as one text for a model or a log."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        problem = self.problem()
        if problem:
            parts.append(f"[{problem}]")
        return "\n".join(parts) if parts else "[no output]"

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
            "killed_by_signal": self.killed_by_signal,
            "isolation": self.isolation,
        }


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@dataclass(frozen=True, slots=True)
class SandboxHost:
    """Process-wide sandbox settings, set once by the composition root (`configure_sandbox`)."""

    isolation: IsolationChoice = "auto"
    uids: range = range(60000, 61000)  # leased one per running call when the server is root
    lock_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "genworker-sandbox")


@dataclass(frozen=True, slots=True)
class _Detected:
    isolation: Isolation
    bwrap: str | None
    reason: str


_host = SandboxHost()
_detected: dict[IsolationChoice, _Detected] = {}
_detect_lock = threading.Lock()


def configure_sandbox(host: SandboxHost) -> None:
    global _host
    with _detect_lock:
        _host = host
        _detected.clear()


def sandbox_status() -> dict[str, Any]:
    """What isolation calls get on this host, and why (for the debug endpoint). Probes bwrap once."""
    try:
        found = _isolation(_host.isolation)
    except SandboxError as exc:
        found = _Detected("rlimits", shutil.which("bwrap"), f"unavailable: {exc}")
    uid_drop = _drops_privileges()
    python = sandbox_python()
    return {
        "isolation": found.isolation,
        "bwrap": found.bwrap,
        "reason": found.reason,
        "uid_drop": uid_drop,
        "uid_range": f"{_host.uids.start}-{_host.uids.stop - 1}" if uid_drop else None,
        "network": "none" if found.isolation == "bwrap" else "not isolated",
        "filesystem": _filesystem_note(found.isolation),
        "python": python,
        "default_limits": asdict(DEFAULT_LIMITS),
    }


def _filesystem_note(isolation: Isolation) -> str:
    if isolation == "bwrap":
        return "only system folders (read-only) and the call's folder (read-write) are visible"
    return "whole filesystem visible; access limited by file permissions of the sandbox user"


def _drops_privileges() -> bool:
    return os.geteuid() == 0


# --- which isolation -------------------------------------------------------------------------


def _isolation(choice: IsolationChoice) -> _Detected:
    with _detect_lock:
        if choice not in _detected:
            _detected[choice] = _detect(choice)
        return _detected[choice]


def _detect(choice: IsolationChoice) -> _Detected:
    fallback: Isolation = "rlimits+uid" if _drops_privileges() else "rlimits"
    if choice == "rlimits":
        return _Detected(fallback, shutil.which("bwrap"), "configured: bubblewrap not used")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        found = _Detected(fallback, None, "bwrap is not installed")
    else:
        failure = _probe_bwrap(bwrap)
        if failure is None:
            found = _Detected("bwrap", bwrap, "bwrap probe run succeeded")
        else:
            found = _Detected(fallback, bwrap, f"bwrap is installed but a probe run failed: {failure}")
    if choice == "bwrap" and found.isolation != "bwrap":
        raise SandboxError(f"bubblewrap isolation required but unavailable: {found.reason}")
    return found


def _probe_bwrap(bwrap: str) -> str | None:
    """None when `bwrap` can build our sandbox here, exactly as a call would, else why not."""
    folder = Path(tempfile.mkdtemp(prefix="genworker-probe-"))
    lease = _LEASES.acquire(folder) if _drops_privileges() else None
    try:
        argv = _command(["true"], folder, bwrap, lease)
        done: subprocess.CompletedProcess[str] = subprocess.run(
            argv, cwd=folder, env=_base_env(folder), capture_output=True, encoding="utf-8",
            errors="replace", timeout=20, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return None
        return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError, SandboxError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if lease is not None:
            _LEASES.release(lease)
        shutil.rmtree(folder, ignore_errors=True)


def _command(argv: list[str], cwd: Path, bwrap: str | None, lease: _Lease | None) -> list[str]:
    """The full argv of one call (without bwrap, the child drops to the leased uid itself: `_enter`)."""
    if bwrap is None:
        return argv
    if lease is None:  # not root: unprivileged bwrap in a user namespace, as ourselves
        return [bwrap, "--unshare-all", *_bwrap_mounts(cwd), "--", *argv]
    # Root: bwrap could not reach a cwd below folders the sandbox uid may not traverse, so it runs
    # as root (no user namespace) and setpriv drops to the leased uid inside, after the mounts.
    setpriv = shutil.which("setpriv", path=_PATH)
    if setpriv is None:
        raise SandboxError("setpriv (util-linux) is needed to drop privileges inside bwrap")
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    drop = [setpriv, f"--reuid={lease.uid}", f"--regid={lease.uid}", "--clear-groups", "--no-new-privs"]
    drop += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    return [bwrap, *namespaces, *_bwrap_mounts(cwd), "--", *drop, *argv]


def _bwrap_mounts(cwd: Path) -> list[str]:
    args = ["--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev"]
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    args += _open_parents(Path("/etc/passwd"))
    args += [arg for name in _ETC_FILES if Path(name).exists() for arg in ("--ro-bind", name, name)]
    python = sandbox_python()
    if python is not None:
        prefix = Path(python).parent.parent
        if not any(prefix == Path(d) or Path(d) in prefix.parents for d in _SYSTEM_DIRS):
            args += [*_open_parents(prefix), "--ro-bind", str(prefix), str(prefix)]
    return [*args, *_open_parents(cwd), "--bind", str(cwd), str(cwd), "--chdir", str(cwd)]


def _open_parents(path: Path) -> list[str]:
    # bwrap creates missing mount-point parents 0700; as root that would shut out the sandbox uid.
    return [arg for parent in reversed(path.parents[:-1]) for arg in ("--perms", "0755", "--dir", str(parent))]


_python: list[str | None] = []


def sandbox_python() -> str | None:
    """An interpreter the sandbox user can run: ours if world-executable, else a system python3."""
    if not _python:
        candidates = [os.path.realpath(sys.executable)]
        candidates += [p for d in _PATH.split(":") if (p := os.path.realpath(Path(d) / "python3")) not in candidates]
        usable: Callable[[str], bool] = _world_executable if _drops_privileges() else _executable
        _python.append(next((c for c in candidates if Path(c).is_file() and usable(c)), None))
    return _python[0]


def _executable(path: str) -> bool:
    return os.access(path, os.X_OK)


def _world_executable(path: str) -> bool:
    target = Path(path)
    try:
        if not target.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in target.parents)
    except OSError:
        return False


# --- uid leases --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Lease:
    folder: Path
    uid: int
    lock_fd: int
    holders: int = 1


class _UidLeases:
    """One uid per folder in use. The folder tree is given to the uid while leased and back to us after.

    A flock per uid keeps other genworker processes on this host off the same uid.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_folder: dict[Path, _Lease] = {}

    def acquire(self, folder: Path) -> _Lease:
        with self._lock:
            lease = self._by_folder.get(folder)
            if lease is not None:
                lease.holders += 1
                return lease
            uid, lock_fd = self._reserve()
            try:
                _sweep(uid)  # leftovers of a crashed process that held this uid
                _chown_tree(folder, uid, uid)
            except BaseException:
                os.close(lock_fd)
                raise
            lease = self._by_folder[folder] = _Lease(folder, uid, lock_fd)
            return lease

    def release(self, lease: _Lease) -> None:
        with self._lock:
            lease.holders -= 1
            if lease.holders:
                return
            del self._by_folder[lease.folder]
            try:
                _sweep(lease.uid)
                with contextlib.suppress(FileNotFoundError):  # the folder was cleaned up meanwhile
                    _chown_tree(lease.folder, os.geteuid(), os.getegid())
            finally:
                os.close(lease.lock_fd)

    def sweep_if_alone(self, lease: _Lease) -> None:
        with self._lock:
            if lease.holders == 1:
                _sweep(lease.uid)

    def _reserve(self) -> tuple[int, int]:
        uids = _host.uids
        lock_dir = _lock_dir(_host.lock_dir)
        in_use = {lease.uid for lease in self._by_folder.values()}
        start = random.randrange(len(uids))
        for uid in (uids[(start + i) % len(uids)] for i in range(len(uids))):
            if uid in in_use or uid == 0:
                continue
            fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return uid, fd
        raise SandboxError(f"no free sandbox uid in {uids.start}-{uids.stop - 1}: too many sandboxes running")


_LEASES = _UidLeases()


def _lock_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise SandboxError(f"{path} must be a directory owned by uid {os.geteuid()} with mode 0700")
    return path


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Own `root` and everything under it; never follows symlinks, and skips hard-linked files
    (a link to a file outside the tree must not hand that file over)."""
    os.chown(root, uid, gid, follow_symlinks=False)
    root.chmod(0o700)
    for _, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) or info.st_nlink == 1:
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def _sweep(uid: int) -> None:
    """SIGKILL every process of `uid` (a process running as that uid calls kill(-1))."""
    if uid in (0, os.getuid(), os.geteuid()):
        raise SandboxError(f"refusing to sweep uid {uid}")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["true"], env={"PATH": _PATH}, cwd="/", user=uid, group=uid, extra_groups=[],
            preexec_fn=_kill_all_of_own_uid, check=False, timeout=10,
        )  # fmt: skip


def _kill_all_of_own_uid() -> None:
    for _ in range(100):  # a bounded loop: zombies stay "signalable" until reaped
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return


# --- running ----------------------------------------------------------------------------------


def _base_env(cwd: Path) -> dict[str, str]:
    # Built from nothing: the server's environment (API keys, REDIS_URL, tokens) is never inherited.
    return {"PATH": _PATH, "HOME": str(cwd), "TMPDIR": str(cwd), "PWD": str(cwd), "LANG": "C.UTF-8"}


def _rlimits(limits: SandboxLimits, processes: int) -> list[tuple[int, int, int]]:
    return [
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1),
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_NPROC, processes, processes),
        (resource.RLIMIT_CORE, 0, 0),
    ]


_PR_SET_NO_NEW_PRIVS = 38  # setuid binaries (su, sudo, mount) cannot raise privileges
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _enter(cwd: str, uid: int | None, limits: Sequence[tuple[int, int, int]], umask: int) -> None:
    """The child's set-up between fork and exec (preexec_fn): cwd, uid drop, rlimits.

    The loop's own `cwd=`/`user=` are not used: uvloop refuses `user`, `group` and `extra_groups`, and
    runs preexec_fn before its chdir, which the sandbox uid could fail where a parent folder is closed
    to it. Only system calls here, no Python-level locks, so the preexec_fn-with-threads deadlock
    does not apply.
    """
    try:
        os.chdir(cwd)
    except OSError as exc:
        raise OSError(f"cannot enter {cwd}: {exc.strerror}") from None
    if uid is not None:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        except OSError as exc:
            raise OSError(f"cannot drop to uid {uid}: {exc.strerror}") from None
    _apply_rlimits(limits, umask)


def _apply_rlimits(limits: Sequence[tuple[int, int, int]], umask: int) -> None:
    for which, soft, hard in limits:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
        resource.setrlimit(which, (min(soft, hard), hard))
    os.umask(umask)
    if _LIBC is not None and _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def _own_process_count() -> int:
    """Processes of our own uid: without a uid drop RLIMIT_NPROC counts them too."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


class _Collector(asyncio.SubprocessProtocol):
    """Keeps at most `cap` bytes per stream; past that it kills the process group (the child leads
    it) and drops the rest. Output can arrive before `connection_made`, so either may do the kill."""

    def __init__(self, cap: int) -> None:
        self.streams = {1: bytearray(), 2: bytearray()}
        self.truncated = False
        self.pid: int | None = None
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()
        self._cap = cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # duck-typed: uvloop's process transport does not subclass asyncio.SubprocessTransport
        self.pid = cast(asyncio.SubprocessTransport, transport).get_pid()
        if self.truncated:
            _kill_group(self.pid)

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        buffer = self.streams[fd]
        room = self._cap - len(buffer)
        if len(data) <= room:
            buffer += data
            return
        buffer += data[: max(room, 0)]
        if not self.truncated:
            self.truncated = True
            _kill_group(self.pid)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


def _kill_group(pgid: int | None) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


async def run_sandboxed(
    argv: Sequence[str],
    *,
    cwd: Path,
    stdin: bytes | None = None,
    limits: SandboxLimits,
    extra_env: Mapping[str, str] = MappingProxyType({}),
    pass_fds: Sequence[int] = (),
    isolation: IsolationChoice | None = None,
) -> SandboxResult:
    """Run `argv` confined to the folder `cwd` (which the sandbox may write) and collect its output.

    `cwd` should be a scratch folder: while the call runs, its tree belongs to the sandbox uid.
    `isolation` overrides the host setting for this call (tests use it to force a layer).
    """
    if not argv:
        raise SandboxError("nothing to run: argv is empty")
    try:
        found = await asyncio.to_thread(_isolation, isolation or _host.isolation)
        folder = await asyncio.to_thread(_checked_folder, cwd)
        lease = await _acquire(folder) if _drops_privileges() else None
        try:
            return await _run(list(argv), folder, stdin, limits, extra_env, pass_fds, found, lease)
        finally:
            if lease is not None:
                await asyncio.to_thread(_LEASES.release, lease)
    except SandboxError as exc:
        log.warning("sandboxed %r did not start: %s", argv[0], exc)
        raise


def _checked_folder(cwd: Path) -> Path:
    if cwd.is_symlink() or not cwd.is_dir():
        raise SandboxError(f"sandbox folder {cwd} must be an existing directory, not a symlink")
    folder = cwd.resolve()
    if folder == Path(folder.anchor):
        raise SandboxError("the sandbox folder cannot be the filesystem root")
    return folder


async def _acquire(folder: Path) -> _Lease:
    # The acquiring thread cannot be interrupted: if we are cancelled meanwhile, release when it is done.
    future = asyncio.get_running_loop().run_in_executor(None, _LEASES.acquire, folder)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_release_orphan)
        raise


def _release_orphan(future: asyncio.Future[_Lease]) -> None:
    if not future.cancelled() and future.exception() is None:
        threading.Thread(target=_LEASES.release, args=(future.result(),), daemon=True).start()


async def _run(
    argv: list[str],
    cwd: Path,
    stdin: bytes | None,
    limits: SandboxLimits,
    extra_env: Mapping[str, str],
    pass_fds: Sequence[int],
    found: _Detected,
    lease: _Lease | None,
) -> SandboxResult:
    bwrap = found.bwrap if found.isolation == "bwrap" else None
    argv = _command(argv, cwd, bwrap, lease)
    processes = limits.processes
    if lease is None:  # the limit counts all our own processes (and bwrap's two)
        processes += await asyncio.to_thread(_own_process_count) + (_BWRAP_PROCESSES if bwrap else 0)
    rlimits = _rlimits(limits, processes)
    drop = lease.uid if lease is not None and bwrap is None else None  # under bwrap, setpriv drops
    loop = asyncio.get_running_loop()
    try:
        transport, collector = await loop.subprocess_exec(
            lambda: _Collector(limits.output_bytes),
            *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**_base_env(cwd), **extra_env},
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            # without bwrap, /tmp is shared with other runs: keep what the sandbox writes private
            preexec_fn=functools.partial(_enter, str(cwd), drop, rlimits, 0o022 if bwrap else 0o077),
        )
    except Exception as exc:  # OSError, SubprocessError, or a loop refusing an argument (ValueError)
        raise SandboxError(f"cannot start {argv[0]!r}: {_start_failure(exc)}") from exc
    pgid = transport.get_pid()
    try:
        if stdin is not None:
            pipe = transport.get_pipe_transport(0)
            if pipe is not None:  # uvloop's pipe transports do not subclass asyncio.WriteTransport
                writer = cast(asyncio.WriteTransport, pipe)
                writer.write(stdin)
                writer.close()  # flushes, then closes: the child sees EOF
        timed_out = False
        try:
            async with asyncio.timeout(limits.wall_timeout_s):
                await collector.exited.wait()
        except TimeoutError:
            timed_out = True
        _kill_group(pgid)  # nothing outlives the call
        if lease is not None:
            await asyncio.to_thread(_LEASES.sweep_if_alone, lease)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_DRAIN_GRACE_S):
                await collector.closed.wait()
    finally:
        _kill_group(pgid)
        transport.close()
    return _result(transport.get_returncode(), collector, timed_out, found.isolation)


def _start_failure(exc: BaseException) -> str:
    # uvloop carries the preexec_fn's own error as the cause; asyncio only says preexec_fn failed
    cause = exc.__cause__
    return f"{exc} ({cause})" if cause is not None and str(cause) not in str(exc) else str(exc)


def _result(code: int | None, collector: _Collector, timed_out: bool, isolation: Isolation) -> SandboxResult:
    signal_number: int | None = None
    if code is not None and code < 0:
        signal_number, code = -code, None
    elif isolation == "bwrap" and code is not None and 128 < code < 128 + signal.NSIG:
        signal_number, code = code - 128, None  # bwrap reports a signal death as 128 + signal
    return SandboxResult(
        exit_code=code,
        stdout=collector.streams[1].decode("utf-8", errors="replace"),
        stderr=collector.streams[2].decode("utf-8", errors="replace"),
        timed_out=timed_out,
        truncated=collector.truncated,
        killed_by_signal=signal_number,
        isolation=isolation,
    )


# --- scratch folders -------------------------------------------------------------------------


async def prepare_scratch(scope: ToolScope) -> Path:
    """The run's scratch folder, `{worker_dir}/runtime/scratch/{run_id}/`, created if missing."""
    folder = scope.worker_dir / "runtime" / "scratch" / validate_id(scope.run_id, "run id")

    def make() -> Path:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    return await asyncio.to_thread(make)
