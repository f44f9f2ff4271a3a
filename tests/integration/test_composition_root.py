"""The composition root: a started runtime has every service built; a part that fails to start
stops the parts built before it; stop unwinds everything (runtime/assembly.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.autonomy.sensing import SensorRegistry
from genworker.runtime.assembly import Services
from genworker.runtime.composition import Runtime, RuntimeNotStarted, build_runtime
from genworker.settings import load_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _runtime(tmp_path: Path, small_workspace: Callable[..., Path]) -> Runtime:
    workspace = small_workspace({"acme": ["alice"]})
    (tmp_path / "configs").mkdir(exist_ok=True)
    settings = load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace)
    return build_runtime(settings)


def _ours() -> set[asyncio.Task[object]]:
    """The tasks still running on this loop, besides the test's own."""
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


def test_no_service_of_a_started_runtime_stands_for_not_built_yet() -> None:
    hints = typing.get_type_hints(Services)
    optional = {f.name for f in dataclasses.fields(Services) if type(None) in typing.get_args(hints[f.name])}
    assert optional == {"aredis"}  # a variant: the file backends need no async Redis client
    assert Services.__dataclass_params__.frozen  # type: ignore[attr-defined]


async def test_a_started_runtime_has_every_service_and_stop_unwinds_them_all(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    runtime = await asyncio.to_thread(_runtime, tmp_path, small_workspace)
    with pytest.raises(RuntimeNotStarted):
        runtime.services  # noqa: B018 - the property raises before start
    before = _ours()
    await runtime.start()
    services = runtime.services
    assert all(getattr(services, f.name) is not None for f in dataclasses.fields(Services) if f.name != "aredis")
    assert services.leases.alive(services.leases.instance_id)
    assert services.heartbeat.scheduler.jobs()  # the worker's heartbeat is scheduled
    await runtime.stop()
    with pytest.raises(RuntimeNotStarted):
        runtime.services  # noqa: B018
    assert not services.leases.alive(services.leases.instance_id)  # released at once, not left to expire
    assert not services.heartbeat.scheduler.jobs()
    assert _ours() <= before  # every task it started has ended


async def test_a_part_that_fails_to_start_stops_the_parts_built_before_it(
    tmp_path: Path, small_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await asyncio.to_thread(_runtime, tmp_path, small_workspace)
    seen: list[Runtime] = []

    async def broken_sync(self: SensorRegistry, workers: object) -> None:  # the last part built
        seen.append(runtime)
        raise OSError("sensor cursor folder is read-only")

    monkeypatch.setattr(SensorRegistry, "sync", broken_sync)
    before = _ours()
    with pytest.raises(OSError, match="read-only"):
        await runtime.start()
    assert seen  # it failed where it was told to, after every other part had started
    with pytest.raises(RuntimeNotStarted):
        runtime.services  # noqa: B018
    assert _ours() <= before  # the lease holder, outbox, channels, schedulers, email polling: all stopped
    monkeypatch.undo()

    again = await asyncio.to_thread(_runtime, tmp_path, small_workspace)  # nothing left held on disk
    await again.start()
    try:
        assert again.services.heartbeat.scheduler.jobs()
    finally:
        await again.stop()
