"""`genworker run` and `make run` as a user starts them: the port is taken before anything runs,
a SIGTERM ends the server cleanly with exit status 0, and `genworker --version`."""

from __future__ import annotations

import importlib.metadata
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
GENWORKER = Path(sys.executable).with_name("genworker")
STARTED = "Uvicorn running on"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The process environment without settings that would reach past the test (a real model, Redis,
    another configs folder, an outer make's flags), with an empty configs folder of its own."""
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    drop = ("GENWORKER_", "HTTP_", "REDIS_", "MAKE", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in ("ENVIRONMENT", "ENV")}
    return {**env, "GENWORKER_CONFIG_DIR": str(configs), "PYTHONUNBUFFERED": "1", **extra}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root with its size and modification time."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            found[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def test_a_taken_port_fails_before_the_runtime_starts(tmp_path: Path, demo_workspace: Path) -> None:
    before = snapshot(demo_workspace)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(GENWORKER), "run", "--port", str(port), "--workspace", str(demo_workspace)],
            capture_output=True, text=True, encoding="utf-8", env=clean_env(tmp_path), timeout=120,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"genworker: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "[Runtime]" not in result.stdout + result.stderr  # the runtime never started
    assert snapshot(demo_workspace) == before  # no duty run, no sensor snapshot, no lock file
    assert not any((tmp_path / "configs").iterdir())


def test_version() -> None:
    result = subprocess.run([str(GENWORKER), "--version"], capture_output=True, text=True, encoding="utf-8", timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"genworker {importlib.metadata.version('genworker')}\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # the field after the state: the parent
                found.append(int(entry.name))
    return found


@contextmanager
def make_run(tmp_path: Path, workspace: Path) -> Iterator[tuple[subprocess.Popen[str], int, list[str]]]:
    """`make run` serving `workspace` on a free port, once it listens: (make, the recipe's process,
    the stderr lines so far, which grow until make has exited)."""
    port = free_port()
    env = clean_env(tmp_path, HTTP_PORT=str(port), GENWORKER_WORKSPACE=str(workspace))
    # -o: an install stamp older than pyproject.toml (a local edit) must not reinstall during a test
    command = ["make", "--no-print-directory", "-o", ".venv/.installed", "run", f"PY={sys.executable}"]
    make = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, encoding="utf-8",
        start_new_session=True,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert make.stderr is not None
        for line in make.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while not any(STARTED in line for line in seen):
            line = lines.get(timeout=120)
            assert line is not None, "make run exited:\n" + "".join(seen)
            seen.append(line)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
        (server,) = children(make.pid)
        yield make, server, seen
        make.wait(timeout=60)
        reader.join(timeout=60)
        while (line := lines.get(timeout=10)) is not None:
            seen.append(line)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait(timeout=60)
        assert make.stderr is not None
        make.stderr.close()


needs_make = pytest.mark.skipif(
    shutil.which("make") is None or not Path("/proc/self/stat").exists(), reason="needs make and Linux /proc"
)


@needs_make
def test_make_run_execs_the_server_and_a_sigterm_ends_it_with_exit_0(tmp_path: Path, demo_workspace: Path) -> None:
    with make_run(tmp_path, demo_workspace) as (make, server, stderr):
        command = Path("/proc", str(server), "cmdline").read_text(encoding="utf-8").split("\0")[:-1]
        assert command == [sys.executable, "start.py"]  # no shell in between: a signal to it is the server's
        os.kill(server, signal.SIGTERM)
    text = "".join(stderr)
    assert make.returncode == 0, text
    assert "make: ***" not in text and "Finished server process" in text and "Traceback" not in text


@needs_make
def test_a_sigterm_to_make_stops_the_server_cleanly(tmp_path: Path, demo_workspace: Path) -> None:
    with make_run(tmp_path, demo_workspace) as (make, _, stderr):
        make.send_signal(signal.SIGTERM)
    text = "".join(stderr)
    # GNU make passes SIGTERM on to its recipe, waits for it, then ends itself by the same signal
    assert make.returncode == -signal.SIGTERM, text
    assert "make: ***" not in text and "Finished server process" in text and "Traceback" not in text
