"""The CLI's HTTP side: one client for a running server, its errors as one clear line, SSE reading.

The server and key come from `--url` / GENWORKER_URL (default http://127.0.0.1:8000) and
`--api-key` / GENWORKER_API_KEY. Every failure is a `CliError` whose message is the line
the user sees; `main` prints it on stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from genworker.observability.logging import redact_text

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_URL", "CliError", "Remote", "add_remote_arguments", "remote_from_args", "worker_path"]

DEFAULT_URL = "http://127.0.0.1:8000"


class CliError(Exception):
    """A failure shown to the user as one line; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_remote_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"server URL (default GENWORKER_URL or {DEFAULT_URL})")
    parser.add_argument("--api-key", help="tenant API key (default GENWORKER_API_KEY)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the server (default 600)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def remote_from_args(args: argparse.Namespace) -> Remote:
    url = (args.url or os.environ.get("GENWORKER_URL") or DEFAULT_URL).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"--url {url!r}: expected http://host:port or https://host", 2)
    key = args.api_key or os.environ.get("GENWORKER_API_KEY")
    if not key:
        hint = "create one with `genworker keys create --tenant T`"
        raise CliError(f"no API key: pass --api-key or set GENWORKER_API_KEY ({hint})", 2)
    return Remote(url, key, args.timeout)


def worker_path(worker: str) -> str:
    """The `{worker_id}` path segment for `worker` or `tenant/worker` (the key's tenant is implied)."""
    tenant, sep, name = worker.partition("/")
    name = name if sep else tenant
    if not name or "/" in name:
        raise CliError(f"worker {worker!r}: expected WORKER or TENANT/WORKER", 2)
    return quote(name, safe="")


@dataclass
class Remote:
    url: str
    api_key: str = field(repr=False)
    timeout: float = 600.0

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", **(extra or {})}

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        import httpx  # here, not with the module: `genworker run` never needs it

        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = httpx.request(
                method, self.url + path, json=body, params=clean, headers=self._headers(headers), timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise _api_error(response.status_code, response.text)
        try:
            return response.json()
        except ValueError:
            status = response.status_code
            raise CliError(f"{method} {path}: the server answered {status} with a non-JSON body") from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        return self.request("POST", path, body=body, headers=headers)

    @contextmanager
    def events(self, path: str, body: Any) -> Iterator[tuple[Mapping[str, str], Iterator[dict[str, Any]]]]:
        """POST `body` and read the answer as SSE: (response headers, the decoded `data:` objects)."""
        import httpx

        try:
            with httpx.stream(
                "POST",
                self.url + path,
                json=body,
                headers=self._headers({"Accept": "text/event-stream"}),
                timeout=self.timeout,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _api_error(response.status_code, response.text)
                yield response.headers, _sse(_lines(response.iter_text()))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: httpx.HTTPError) -> CliError:
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return CliError(f"{self.url}: no answer within {self.timeout:g} s (raise --timeout)")
        if isinstance(exc, httpx.ConnectError):
            return CliError(f"cannot reach {self.url}: {exc or 'connection refused'} (is `genworker run` running?)")
        return CliError(f"{self.url}: {type(exc).__name__}: {redact_text(str(exc))}")


def _api_error(status: int, text: str) -> CliError:
    try:
        error = json.loads(text)["error"]
        message, code = str(error["message"]), str(error["code"])
    except (ValueError, KeyError, TypeError):
        return CliError(f"server error {status}: {redact_text(text.strip()[:200]) or 'no body'}")
    hint = " (check --api-key / GENWORKER_API_KEY)" if status == 401 else ""
    return CliError(f"{code} ({status}): {message}{hint}")


def _lines(chunks: Iterator[str]) -> Iterator[str]:
    """The stream's lines. Not httpx's `iter_lines`: it splits like `str.splitlines`, also on U+2028
    and U+0085, which an event's JSON holds unescaped."""
    pending = ""
    for chunk in chunks:
        *lines, pending = (pending + chunk).split("\n")
        for line in lines:
            yield line.removesuffix("\r")
    if pending:
        yield pending.removesuffix("\r")


def _sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield _decode("\n".join(data))
            data = []
    if data:
        yield _decode("\n".join(data))


def _decode(payload: str) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except ValueError:
        raise CliError(f"the server sent an event that is not JSON: {payload[:120]!r}") from None
    if not isinstance(value, dict):
        raise CliError(f"the server sent an event that is not an object: {payload[:120]!r}")
    return value
