"""run_sandboxed with real processes: confinement, scrubbed env, and every limit, in each isolation layer.

"rlimits" runs everywhere; "bwrap" runs when bubblewrap is installed and usable here. The
confinement checks need root (uid drop) or bwrap: as a plain user without bwrap there is none.
Every test runs under plain asyncio and under uvloop, the loop `genworker run` serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import uvloop

from genworker.tools.sandbox import (
    IsolationChoice,
    SandboxError,
    SandboxLimits,
    SandboxResult,
    run_sandboxed,
    sandbox_python,
    sandbox_status,
)

pytestmark = pytest.mark.anyio

LIMITS = SandboxLimits(wall_timeout_s=20, cpu_s=10, memory_bytes=512 * 2**20, processes=16, output_bytes=64 * 1024)
SECRET = "TOPSECRET-7f3a"
IS_ROOT = os.geteuid() == 0


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    if request.param == "uvloop":
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"


@pytest.fixture(params=["rlimits", "bwrap"])
def isolation(request: pytest.FixtureRequest) -> IsolationChoice:
    choice: IsolationChoice = request.param
    if choice == "bwrap":
        status = sandbox_status()
        if status["isolation"] != "bwrap":
            pytest.skip(f"bubblewrap not usable here: {status['reason']}")
    return choice


@pytest.fixture
def bwrap() -> IsolationChoice:
    status = sandbox_status()
    if status["isolation"] != "bwrap":
        pytest.skip(f"bubblewrap not usable here: {status['reason']}")
    return "bwrap"


@pytest.fixture
def confined(isolation: IsolationChoice) -> IsolationChoice:
    if isolation == "rlimits" and not IS_ROOT:
        pytest.skip("no filesystem or process confinement without root (uid drop) or bubblewrap")
    return isolation


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    worker = tmp_path / "worker"
    (worker / "runtime" / "scratch" / "run-1").mkdir(parents=True)
    credentials = worker / "CHANNEL_CREDENTIALS.json"
    credentials.write_text(f'{{"token": "{SECRET}"}}', encoding="utf-8")
    credentials.chmod(0o600)
    (worker / "PERSONA.md").write_text("persona text PERSONA-MARK", encoding="utf-8")
    return worker


@pytest.fixture
def folder(worker: Path) -> Path:
    return worker / "runtime" / "scratch" / "run-1"


async def bash(
    command: str, folder: Path, isolation: IsolationChoice, limits: SandboxLimits = LIMITS, stdin: bytes | None = None
) -> SandboxResult:
    return await run_sandboxed(
        ["bash", "--noprofile", "--norc", "-c", command], cwd=folder, limits=limits, isolation=isolation, stdin=stdin
    )


def python() -> str:
    interpreter = sandbox_python()
    assert interpreter is not None, "no python3 the sandbox user can run: install one (see docs/sandbox.md)"
    return interpreter


def owners(*paths: Path) -> list[int]:
    return [path.stat().st_uid for path in paths]


def exists(*paths: Path) -> bool:
    return any(path.exists() for path in paths)


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (zombies have an empty one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


async def assert_all_gone(marker: str, within_s: float = 5.0) -> None:
    """Every process carrying `marker` has exited (waits on pidfds, which turn readable at exit)."""
    loop = asyncio.get_running_loop()
    for pid in await asyncio.to_thread(processes_with, marker):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        exited = asyncio.Event()
        loop.add_reader(fd, exited.set)
        try:
            await asyncio.wait_for(exited.wait(), within_s)
        except TimeoutError:
            pytest.fail(f"process {pid} ({marker}) outlived its sandbox")
        finally:
            loop.remove_reader(fd)
            os.close(fd)


async def test_runs_in_the_folder_and_keeps_files(folder: Path, isolation: IsolationChoice) -> None:
    result = await bash("echo hello; pwd; echo data > out.txt; exit 3", folder, isolation)

    assert result.exit_code == 3 and result.killed_by_signal is None
    assert result.stdout == f"hello\n{folder}\n"
    assert result.isolation == ("bwrap" if isolation == "bwrap" else ("rlimits+uid" if IS_ROOT else "rlimits"))
    assert await asyncio.to_thread((folder / "out.txt").read_text, encoding="utf-8") == "data\n"
    if IS_ROOT:  # the tree is handed back once the call is over
        assert await asyncio.to_thread(owners, folder, folder / "out.txt") == [0, 0]


async def test_runs_as_an_unprivileged_user(folder: Path, isolation: IsolationChoice) -> None:
    result = await bash("id -u; grep NoNewPrivs /proc/self/status", folder, isolation)

    uid, no_new_privs = result.stdout.splitlines()
    assert int(uid) != 0
    assert no_new_privs.split() == ["NoNewPrivs:", "1"]


async def test_stdin_reaches_the_command(folder: Path, isolation: IsolationChoice) -> None:
    result = await bash("tr a-z A-Z", folder, isolation, stdin=b"shout\n")

    assert result.stdout == "SHOUT\n"


@pytest.mark.parametrize(
    "command",
    [
        "cat ../../../CHANNEL_CREDENTIALS.json",
        "cd ../../.. && cat CHANNEL_CREDENTIALS.json",
        "cat {worker}/CHANNEL_CREDENTIALS.json",
        "cat /etc/shadow",
        "cat ../../../../../../../../etc/shadow",
        "echo escaped > ../escaped.txt",
        "echo escaped > {worker}/escaped.txt",
    ],
)
async def test_cannot_reach_outside_its_folder(
    command: str, worker: Path, folder: Path, confined: IsolationChoice
) -> None:
    result = await bash(command.format(worker=worker), folder, confined)

    assert result.exit_code != 0
    assert SECRET not in result.stdout
    assert "root:" not in result.stdout
    assert not await asyncio.to_thread(exists, worker / "runtime" / "scratch" / "escaped.txt", worker / "escaped.txt")


async def test_bwrap_shows_nothing_of_the_workspace(worker: Path, folder: Path, bwrap: IsolationChoice) -> None:
    # without bwrap, world-readable files stay readable to the sandbox uid (docs/sandbox.md)
    seen = await bash(f"cat {worker}/PERSONA.md; ls {worker}; echo; ls /", folder, bwrap)

    in_worker, root = seen.stdout.split("\n\n")
    assert "PERSONA-MARK" not in seen.stdout
    assert in_worker.split() == ["runtime"]  # only the path down to the scratch folder
    system = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "usr"}
    assert set(root.split()) <= system | {worker.parts[1]}


async def test_environment_is_scrubbed(
    folder: Path, isolation: IsolationChoice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GENWORKER_FAKE_SECRET", "hunter2-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key")
    monkeypatch.setenv("REDIS_URL", "redis://:pw-in-url@host/0")

    result = await bash("env; cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", folder, isolation)

    for value in ("hunter2-secret", "sk-fake-key", "pw-in-url"):
        assert value not in result.stdout
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert {"PATH", "HOME", "LANG"} <= names
    if isolation == "bwrap" or IS_ROOT:
        assert names <= {"PATH", "HOME", "TMPDIR", "PWD", "LANG", "SHLVL", "_"}


async def test_fork_bomb_is_bounded(folder: Path, isolation: IsolationChoice) -> None:
    marker = f"forkbomb-{secrets.token_hex(4)}"
    code = f"""# {marker}
import os, signal
forked = 0
while forked < 500:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    forked += 1
print(forked)
"""
    limits = replace(LIMITS, processes=8)

    result = await run_sandboxed([python(), "-I", "-c", code], cwd=folder, limits=limits, isolation=isolation)

    forked = int(result.stdout)
    assert 0 < forked < 8 if (IS_ROOT or isolation == "bwrap") else forked < 100
    await assert_all_gone(marker)


async def test_shell_fork_bomb_is_stopped_and_cleaned_up(folder: Path, isolation: IsolationChoice) -> None:
    marker = f"shellbomb-{secrets.token_hex(4)}"
    limits = replace(LIMITS, processes=8, wall_timeout_s=2.0)

    result = await bash(f"b() {{ b | b & }}; b; wait # {marker}", folder, isolation, limits)

    # Either the forks hit RLIMIT_NPROC and the bomb collapsed on its own (the failing subshells'
    # messages may or may not reach stderr), or the wall timeout killed the group. Both are fine;
    # what matters is that the call returned and no process of it is left.
    assert result.timed_out or result.exit_code is not None
    await assert_all_gone(marker)


async def test_background_processes_do_not_outlive_the_call(folder: Path, isolation: IsolationChoice) -> None:
    if isolation == "rlimits" and not IS_ROOT:
        pytest.skip("a process that leaves the session can only be swept by uid (root) or bwrap")
    marker = f"daemon-{secrets.token_hex(4)}"

    result = await bash(f"setsid bash -c 'sleep 300; echo {marker}' & echo started", folder, isolation)

    assert result.stdout == "started\n" and not result.timed_out
    await assert_all_gone(marker)


async def test_cancelling_the_call_kills_the_command(folder: Path, isolation: IsolationChoice) -> None:
    """The pipeline's timeout middleware cancels the tool's task: nothing may be left running."""
    marker = f"cancelled-{secrets.token_hex(4)}"

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(bash(f"sleep 300; echo {marker}", folder, isolation), 0.5)

    await assert_all_gone(marker)
    if IS_ROOT:
        assert await asyncio.to_thread(owners, folder) == [0]


async def test_concurrent_calls_share_a_folder(folder: Path, isolation: IsolationChoice) -> None:
    results = await asyncio.gather(*(bash(f"echo {n} > {n}.txt; cat {n}.txt", folder, isolation) for n in range(4)))

    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
    if IS_ROOT:
        assert await asyncio.to_thread(owners, folder, *(folder / f"{n}.txt" for n in range(4))) == [0] * 5


async def test_huge_output_is_truncated(folder: Path, isolation: IsolationChoice) -> None:
    limits = replace(LIMITS, output_bytes=4096)

    result = await bash("yes; echo never", folder, isolation, limits)

    assert result.truncated and not result.timed_out
    assert len(result.stdout) == 4096 and result.stdout.startswith("y\ny\n")
    assert "output limit" in result.report()


async def test_huge_stderr_is_truncated(folder: Path, isolation: IsolationChoice) -> None:
    result = await bash("yes error >&2", folder, isolation, replace(LIMITS, output_bytes=1000))

    assert result.truncated and len(result.stderr) == 1000 and result.stdout == ""


async def test_cpu_loop_is_killed_by_the_cpu_limit(folder: Path, isolation: IsolationChoice) -> None:
    limits = replace(LIMITS, cpu_s=1)

    result = await run_sandboxed([python(), "-c", "while True: pass"], cwd=folder, limits=limits, isolation=isolation)

    assert not result.timed_out
    assert result.killed_by_signal in (signal.SIGXCPU, signal.SIGKILL)
    assert "killed by signal" in (result.problem() or "")


async def test_wall_timeout_kills_a_sleeper(folder: Path, isolation: IsolationChoice) -> None:
    result = await bash("sleep 300", folder, isolation, replace(LIMITS, wall_timeout_s=0.5))

    assert result.timed_out and result.exit_code is None  # returned on its own: the sleeper was killed


async def test_memory_hog_fails(folder: Path, isolation: IsolationChoice) -> None:
    limits = replace(LIMITS, memory_bytes=256 * 2**20)
    code = "data = bytearray(1024 * 2**20)\nprint('allocated')"

    result = await run_sandboxed([python(), "-c", code], cwd=folder, limits=limits, isolation=isolation)

    assert not result.ok
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


async def test_file_size_is_limited(folder: Path, isolation: IsolationChoice) -> None:
    limits = replace(LIMITS, file_size_bytes=2**20)

    result = await bash("head -c 3000000 /dev/zero > big.bin", folder, isolation, limits)

    assert not result.ok
    assert await asyncio.to_thread(lambda: (folder / "big.bin").stat().st_size) <= 2**20


async def test_no_network_under_bwrap(folder: Path, bwrap: IsolationChoice) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\nprint('connected')"
        result = await run_sandboxed([python(), "-c", code], cwd=folder, limits=LIMITS, isolation=bwrap)

    assert "connected" not in result.stdout
    assert "ConnectionRefusedError" in result.stderr


async def test_refuses_bad_folders(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")

    for cwd in (tmp_path / "missing", tmp_path / "link", Path("/")):
        with pytest.raises(SandboxError):
            await run_sandboxed(["true"], cwd=cwd, limits=LIMITS)
    with pytest.raises(SandboxError):
        await run_sandboxed([], cwd=tmp_path / "real", limits=LIMITS)


async def test_a_program_that_cannot_start_is_a_sandbox_error_and_a_warning(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SandboxError) as raised:
        await run_sandboxed(["./no-such-program"], cwd=folder, limits=LIMITS, isolation="rlimits")

    assert "cannot start" in str(raised.value) and "No such file" in str(raised.value)
    warnings = [r.getMessage() for r in caplog.records if r.name == "genworker.sandbox"]
    assert [r.levelno for r in caplog.records if r.name == "genworker.sandbox"] == [logging.WARNING]
    assert str(raised.value) in warnings[0]


def test_status_names_the_isolation_in_use() -> None:
    status = sandbox_status()

    assert status["isolation"] in ("bwrap", "rlimits+uid", "rlimits")
    assert status["uid_drop"] is IS_ROOT
    assert status["reason"]
    assert status["default_limits"]["processes"] > 0
    if status["isolation"] == "bwrap":
        assert status["bwrap"] and status["network"] == "none"
