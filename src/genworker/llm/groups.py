"""Model groups and how a call reaches one: `ModelGroups.open(group, request)` gives LiteLLM's stream.

The configuration is a LiteLLM Router `model_list`, and a Router is built from it: it validates the
list, reads `os.environ/` secrets and registers the deployments' prices. A group with several
deployments is called through that Router, which picks one. A group with one deployment, the usual
case, is called through `litellm.acompletion` with the deployment's parameters as the Router
resolved them (unless it sets a rate or concurrency limit, which only the Router enforces): the same
request reaches the provider, without the Router's layers around the call (its routing steps, its
wrapper around the stream and its per-deployment statistics, which only matter when it has several
deployments to choose from). genworker falls back between groups itself (llm/client.py), so a Router
with one deployment, no retries and no cooldowns has nothing to add.

The stream of such a direct call is LiteLLM's own stream wrapper. Once it has given the finish
reason, `rest_of_stream` reads what is left (the usage, in OpenAI's protocol a chunk of its own)
from the provider's stream through LiteLLM's chunk converter, instead of asking the wrapper for
more: at the provider's end of stream the wrapper assembles the whole response again, prices it and
starts its success logging, which is most of LiteLLM's CPU time per streamed call after the request
(docs/benchmarks.md, P1). genworker keeps its own record of every call (tokens, cost, latency) and
reads nothing LiteLLM logs; when success callbacks are configured through LiteLLM's settings,
streams are read through the wrapper to their end instead (llm/client.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from genworker.llm.loader import load_litellm

if TYPE_CHECKING:
    from litellm.router import Router

__all__ = ["ModelGroups", "rest_of_stream"]

_AS_ROUTED = {"max_retries": 0, "caching": False}  # as the Router sends a call: the fallback is ours
_LIMITS = ("rpm", "tpm", "max_parallel_requests")  # per-deployment limits only the Router enforces


def _limited(deployment: Mapping[str, Any]) -> bool:
    """Whether the deployment sets a rate or concurrency limit: its calls then go through the Router."""
    where = (deployment, deployment.get("litellm_params") or {}, deployment.get("model_info") or {})
    return any(part.get(key) is not None for part in where for key in _LIMITS)


class ModelGroups:
    """The configured model groups; raises what LiteLLM raises for a model list it refuses."""

    def __init__(self, model_list: Sequence[Mapping[str, Any]]) -> None:
        load_litellm()
        from litellm.router import Router

        self._router: Router = Router(model_list=[dict(m) for m in model_list], num_retries=0, disable_cooldowns=True)
        names = {str(m["model_name"]) for m in model_list}
        self._direct: dict[str, Mapping[str, Any]] = {}
        for name in names:
            deployments = self._router.registry().deployments(name)
            if len(deployments) == 1 and not _limited(deployments[0]):
                self._direct[name] = {**deployments[0]["litellm_params"], **_AS_ROUTED}

    def direct(self, group: str) -> bool:
        """Whether `group` is called without the Router (it has one deployment)."""
        return group in self._direct

    async def open(self, group: str, request: Mapping[str, Any]) -> Any:
        """Start a streamed call to `group`; the request's keys win over the deployment's, as in the Router."""
        params = self._direct.get(group)
        if params is None:
            return await self._router.acompletion(model=group, **request)
        import litellm

        return await litellm.acompletion(**{**params, **request})


@dataclass(frozen=True, slots=True)
class _Usage:
    """A chunk carrying only the usage LiteLLM set aside from a chunk it already gave."""

    model: str
    usage: Any
    choices: tuple[()] = ()


def rest_of_stream(response: Any) -> AsyncIterator[Any] | None:
    """The chunks left in a direct call's stream once it has given the finish reason, or None for a
    stream this cannot read past LiteLLM's wrapper (a Router's, or a provider's synchronous stream):
    that one is read on through the wrapper."""
    provider: Any = getattr(response, "completion_stream", None)
    convert = getattr(response, "chunk_creator", None)
    recorded = getattr(response, "chunks", None)
    if not callable(convert) or not isinstance(recorded, list) or not hasattr(provider, "__aiter__"):
        return None
    return _rest(provider, convert, recorded)


async def _rest(provider: AsyncIterator[Any], convert: Callable[..., Any], recorded: list[Any]) -> AsyncIterator[Any]:
    counted = False
    async for item in provider:
        chunk = convert(chunk=item)
        if chunk is not None:
            counted = counted or bool(getattr(chunk, "usage", None))
            yield chunk
    if counted:
        return
    # The usage came with a chunk the wrapper gave already (with the last words, or with the finish
    # reason): it gave that chunk without it and kept a copy with it.
    for chunk in reversed(recorded):
        usage = getattr(chunk, "usage", None)
        if usage:
            yield _Usage(getattr(chunk, "model", None) or "", usage)
            return
