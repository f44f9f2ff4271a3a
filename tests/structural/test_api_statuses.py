"""Every status a route can answer is declared in the OpenAPI document (issue #25: a 429 from
/api/v1/chat/stream was not).

What a route can answer is read from the code with `ast`, from the endpoint and its dependencies down
through every function of genworker.api they call:

- `ApiError(N, ...)`, `HTTPException(N, ...)`, `error_response(N, ...)` and `status_code=N` with a
  literal status;
- `start_run(...)`: every status api/runs.py answers a RouteError with (`ROUTE_STATUSES`, by code;
  404 for a code it does not name), such as ServiceBusy's 429;
- `ApiError(exc.status, ...)` where `exc` is an error that carries its own status (`CARRIERS`: caught
  by `except X as exc` or a parameter `exc: X`): every status X or a subclass is made with under its
  package (the literal statuses of its constructor calls and its subclasses' `__init__`).

A status a route cannot really answer although the code path exists is listed in `NOT_ANSWERED` with
the reason. 401, 403, 422 and 500 that follow from how a route is built are added to every operation
by api/openapi.py and so are declared like any other.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

import genworker
from genworker.api.app import create_app
from genworker.api.errors import ApiError, error_responses
from genworker.api.runs import ROUTE_STATUSES, start_run
from genworker.settings import load_settings

SRC = Path(genworker.__file__).resolve().parent
ERRORS = frozenset({"ApiError", "HTTPException", "error_response"})


# error classes that carry an HTTP status the API passes on as it is -> where they are made
CARRIERS: Mapping[str, Path] = {
    "WebhookError": SRC / "autonomy/sensing",
    "ChannelError": SRC / "channels",
}

# (method, path) -> {status: why the route never answers it, although a call it makes could}
NOT_ANSWERED: Mapping[tuple[str, str], Mapping[int, str]] = {
    ("POST", "/api/v1/worker/task/stream"): {
        429: "a one-shot task is not a conversation (conversational=False): service admission never refuses it",
    },
    ("POST", "/v1/chat/completions"): {
        429: "the call is stateless (conversational=False): service admission never refuses it",
    },
    ("POST", "/api/v1/workers/{worker_id}/runs/{run_id}/continue"): {
        429: "a continuation is not a conversation (conversational=False): service admission never refuses it",
    },
    ("POST", "/api/v1/workers/{worker_id}/confirmations/{confirmation_id}/{decision}"): {
        429: "an approved task runs again as no conversation (conversational=False): never refused as busy",
    },
    ("GET", "/api/v1/workers/{worker_id}/goals/{goal_id}"): {
        409: "reading a goal makes no transition (GoalTransitionError comes from the commands sharing _call)",
    },
    **{
        ("POST", f"/api/v1/channel/{{adapter_id}}/{kind}"): {405: "only a GET is refused with 405 (no URL check)"}
        for kind in ("webhook", "interactivity", "slash")
    },
}
# Functions whose errors cannot reach a client: the app's lifespan sets app.state (runtime last) once
# Runtime.start has built the router, and uvicorn takes no request before the lifespan has started.
UNREACHABLE: frozenset[str] = frozenset(
    {
        "genworker.api.deps.runtime_of",
        "genworker.api.deps.api_keys_of",
        "genworker.api.deps.service_limiters_of",
        "genworker.api.runs.router_of",
    }
)


def raised_statuses(name: str, root: Path) -> frozenset[int]:
    """The HTTP statuses error class `name` (or a subclass) is made with under `root`: literal ints of
    its constructor calls, the defaults of a subclass's `status` parameter and the literals it passes
    to `super().__init__`; RouteError's own default, 404, when a call gives none."""
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in root.rglob("*.py")]
    classes = {c for t in trees for c in ast.walk(t) if isinstance(c, ast.ClassDef)}
    family, grew = {name}, True
    while grew:
        grown = {c.name for c in classes if any(_name(b) in family for b in c.bases)}
        family, grew = family | grown, bool(grown - family)
    found: set[int] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) in family:
                found |= _statuses_in(node)
                if name == "RouteError" and len(node.args) < 3 and not node.keywords:
                    found.add(404)
            elif isinstance(node, ast.ClassDef) and node.name in family - {name}:
                for init in ast.walk(node):
                    if isinstance(init, ast.Call) and _name(init.func) == "__init__":
                        found |= _statuses_in(init)
                    elif isinstance(init, ast.arguments):
                        found |= _status_default(init)
    return frozenset(found)


def _status_default(arguments: ast.arguments) -> set[int]:
    """The literal default of a `status` parameter, if any."""
    positional = [*([None] * (len(arguments.args) - len(arguments.defaults))), *arguments.defaults]
    pairs = [
        *zip(arguments.args, positional, strict=True),
        *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
    ]
    return {d.value for a, d in pairs if a.arg == "status" and isinstance(d, ast.Constant) and type(d.value) is int}


def _statuses_in(call: ast.Call) -> set[int]:
    values = [*call.args, *(k.value for k in call.keywords)]
    return {v.value for v in values if isinstance(v, ast.Constant) and type(v.value) is int and 400 <= v.value < 600}


def carried_statuses() -> dict[str, frozenset[int]]:
    carried = {name: raised_statuses(name, root) for name, root in CARRIERS.items()}
    carried["RouteError"] = frozenset({*ROUTE_STATUSES.values(), 404})  # what start_run answers a RouteError with
    return carried


def route_error_codes(root: Path = SRC / "worker") -> set[str]:
    """The literal codes RouteError (or a subclass's `super().__init__`) is raised with under `root`."""
    codes: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == "RouteError"]
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and any(_name(b) == "RouteError" for b in cls.bases):
                calls += [n for n in ast.walk(cls) if isinstance(n, ast.Call) and _name(n.func) == "__init__"]
        codes |= {c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)}
    return codes


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _literal_statuses(node: ast.AST | None) -> set[int]:
    """The int constants a status expression can take (`503 if blocking else 200`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _literal_statuses(node.body) | _literal_statuses(node.orelse)
    return set()


@dataclass
class Reach:
    """What one route can answer, and the calls that could not be read (they fail the test)."""

    statuses: set[int] = field(default_factory=set)
    unread: list[str] = field(default_factory=list)


@dataclass
class StatusReader:
    carried: Mapping[str, frozenset[int]]  # error class -> the statuses it is raised with
    package: str = "genworker.api"
    unreachable: frozenset[str] = UNREACHABLE

    def route(self, route: APIRoute) -> Reach:
        reach = Reach()
        seen: set[str] = set()
        for call in (route.endpoint, *(d.call for d in _dependencies(route.dependant) if d.call is not None)):
            self._function(call, reach, seen)
        return reach

    def _function(self, fn: Callable[..., Any], reach: Reach, seen: set[str]) -> None:
        fn = inspect.unwrap(fn)
        if not inspect.isfunction(fn):
            fn = type(fn).__call__  # a dependency object
        where = f"{fn.__module__}.{fn.__qualname__}"
        if where in seen or where in self.unreachable or not fn.__module__.startswith(self.package):
            return
        seen.add(where)
        tree = _tree(fn)
        passed_on = self._passed_on(tree, reach)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or id(node) in passed_on:
                continue
            name = _name(node.func)
            for keyword in node.keywords:
                if keyword.arg == "status_code":
                    reach.statuses |= _literal_statuses(keyword.value)
            if name in ERRORS and node.args:
                if _literal_statuses(node.args[0]):
                    reach.statuses |= _literal_statuses(node.args[0])
                else:
                    reach.unread.append(f"{where}: {ast.unparse(node)}")
            elif name in ("start_run", "route_error"):  # api/runs.py: a RouteError answered by its code
                reach.statuses |= self.carried["RouteError"]
                continue
            callee = fn.__globals__.get(name) if isinstance(node.func, ast.Name) else None
            if inspect.isfunction(callee):
                self._function(callee, reach, seen)

    def _passed_on(self, tree: ast.AST, reach: Reach) -> set[int]:
        """`ApiError(exc.status, ...)` for `except X as exc` or a parameter `exc: X` of a carrier X: X's
        statuses. The ids of the calls read so."""
        scopes: list[tuple[ast.AST, str, ast.expr]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and node.name is not None and node.type is not None:
                scopes.append((node, node.name, node.type))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                scopes += [(node, a.arg, a.annotation) for a in node.args.args if a.annotation is not None]
        done: set[int] = set()
        for scope, exc, annotation in scopes:
            types = annotation.elts if isinstance(annotation, ast.Tuple) else [annotation]
            carried = [self.carried[_name(t)] for t in types if _name(t) in self.carried]
            for node in ast.walk(scope):
                if isinstance(node, ast.Call) and _name(node.func) in ERRORS and node.args and carried:
                    status = node.args[0]
                    if isinstance(status, ast.Attribute) and _name(status.value) == exc and status.attr == "status":
                        reach.statuses.update(*carried)
                        done.add(id(node))
        return done


@cache
def _tree_of(source: str) -> ast.Module:
    return ast.parse(textwrap.dedent(source))


def _tree(fn: Callable[..., Any]) -> ast.Module:
    return _tree_of(inspect.getsource(fn))


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


def undeclared(
    app: FastAPI, reader: StatusReader, not_answered: Mapping[tuple[str, str], Mapping[int, str]]
) -> list[str]:
    """`METHOD path: status` for each status a documented route can answer that its operation lacks."""
    paths = app.openapi()["paths"]
    missing = []
    for route in _routes(app.routes):
        if not route.include_in_schema:
            continue
        reach = reader.route(route)
        assert reach.unread == [], "a status the reader cannot tell: make it a literal, or teach the reader"
        for method in sorted((route.methods or set()) - {"HEAD"}):
            declared = {int(s) for s in paths[route.path_format][method.lower()]["responses"]}
            exempt = set(not_answered.get((method, route.path_format), {}))
            missing += [f"{method} {route.path_format}: {s}" for s in sorted(reach.statuses - declared - exempt)]
    return missing


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    root = tmp_path_factory.mktemp("statuses")
    return create_app(load_settings(root, {}, workspace=root))


def test_the_errors_that_carry_a_status_are_read() -> None:
    carried = carried_statuses()
    assert carried["RouteError"] == {403, 404, 422, 429}  # 429: ServiceBusy (a service at its capacity)
    assert route_error_codes() == set(ROUTE_STATUSES)  # no code the API would answer 404 unnoticed
    assert carried["WebhookError"] >= {400, 401, 404, 413}
    assert carried["ChannelError"] >= {400, 401, 403, 503}  # VerificationError's 401 is a default


def test_every_status_a_route_can_answer_is_declared(app: FastAPI) -> None:
    assert undeclared(app, StatusReader(carried_statuses()), NOT_ANSWERED) == []


def test_the_exemptions_name_routes_that_exist(app: FastAPI) -> None:
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert sorted(set(NOT_ANSWERED) - documented) == []


def test_a_declared_429_says_when_to_try_again(app: FastAPI) -> None:
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            if "429" in operation["responses"]:
                assert "Retry-After" in operation["responses"]["429"].get("headers", {}), f"{method} {path}"


# The reader itself, on a small app, so that it cannot silently stop seeing a status.


def _limited() -> None:
    raise ApiError(429, "rate_limited", "slow down", {"Retry-After": "1"})


def test_the_reader_finds_an_undeclared_429_directly_and_through_a_run() -> None:
    router = APIRouter()

    @router.post("/limited")
    async def limited_route() -> None:
        _limited()

    @router.post("/declared", responses=error_responses(429))
    async def declared_route() -> None:
        _limited()

    @router.post("/chat")
    async def chat_route() -> None:
        await start_run(None, None)  # type: ignore[arg-type]

    small = FastAPI()
    small.include_router(router)
    reader = StatusReader({"RouteError": frozenset({404, 429})}, package=__name__)
    assert undeclared(small, reader, {}) == ["POST /limited: 429", "POST /chat: 404", "POST /chat: 429"]
    assert undeclared(small, reader, {("POST", "/chat"): {404: "x", 429: "y"}}) == ["POST /limited: 429"]
