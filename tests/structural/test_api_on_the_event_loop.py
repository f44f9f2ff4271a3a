"""Every route and every dependency of the HTTP API is `async def`: FastAPI runs a plain `def`
one in its thread pool, a thread hand-off and back on each request (measured: about 0.5 ms of a
chat turn's 0.7 ms between the key check and the endpoint, on the P1 bench). Blocking work inside
them goes to a thread explicitly (`asyncio.to_thread`, `run_in_threadpool`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from genworker.api.app import create_app
from genworker.settings import load_settings


def _routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)  # an included APIRouter, as FastAPI keeps it
        if included is not None:
            yield from _routes(included.routes)


def _dependencies(dependant: Dependant) -> Iterator[Dependant]:
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def test_no_route_or_dependency_runs_in_the_thread_pool(tmp_path: Path) -> None:
    app = create_app(load_settings(tmp_path, {}))
    routes = list(_routes(app.routes))
    assert len(routes) > 50  # the whole API, not a stub
    sync = [
        f"{route.path}: {getattr(call, '__qualname__', call)}"
        for route in routes
        for call in (route.endpoint, *(d.call for d in _dependencies(route.dependant) if d.call is not None))
        if not inspect.iscoroutinefunction(call if inspect.isroutine(call) else type(call).__call__)  # or an object
    ]
    assert sync == []
