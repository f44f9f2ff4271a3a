"""LLMClient: intent -> tier -> LiteLLM Router model group, with the fallback chain.

Fallback runs reasoning -> strong -> standard -> fast over the configured groups, on
429, 5xx, timeouts and connection errors — before the first streamed token only; after
it, a failure is an error of this call. Every call produces one `LLMCallRecord`.

How a call reaches a group's deployment is llm/groups.py's. LiteLLM is imported when a configured
client is built (llm/loader.py), or with its first call under GENWORKER_LLM_LOAD=first_use, not with
this module; token counting does not need it (llm/tokenizer.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from genworker.llm.config_source import ModelConfig, ModelConfigState
from genworker.llm.errors import ContextOverflowError, ModelNotConfiguredError, ProviderError, ProviderErrorKind
from genworker.llm.groups import ModelGroups, rest_of_stream
from genworker.llm.intent import LLMCallIntent, Tier
from genworker.llm.routing_policy import TableRoutingPolicy
from genworker.observability.metrics import record_llm_call

__all__ = [
    "Completion",
    "LLMCallRecord",
    "LLMClient",
    "ModelToolCall",
    "StreamDone",
    "StreamEvent",
    "TextChunk",
    "ToolCallChunk",
    "recorded_tokens",
    "recording",
]

_RECORDING: ContextVar[list[LLMCallRecord] | None] = ContextVar("genworker_llm_calls", default=None)


@contextmanager
def recording() -> Iterator[list[LLMCallRecord]]:
    """Collect the records of every model call made in this context (tasks included)."""
    calls: list[LLMCallRecord] = []
    token = _RECORDING.set(calls)
    try:
        yield calls
    finally:
        _RECORDING.reset(token)


def recorded_tokens() -> int | None:
    """Prompt + completion tokens of the calls recorded so far in this context; None when not recording."""
    calls = _RECORDING.get()
    return None if calls is None else sum(c.prompt_tokens + c.completion_tokens for c in calls)


log = logging.getLogger("genworker.llm")


@cache
def _fallback_errors() -> tuple[tuple[type[Exception], ProviderErrorKind], ...]:
    from litellm import exceptions as llm_errors  # loaded: only a configured client's calls fail

    return (
        (llm_errors.RateLimitError, "rate_limited"),
        (llm_errors.Timeout, "timeout"),
        (llm_errors.APIConnectionError, "connection"),
        (llm_errors.InternalServerError, "server_error"),
        (llm_errors.ServiceUnavailableError, "server_error"),
        (llm_errors.BadGatewayError, "server_error"),
    )


def _brief(exc: BaseException, limit: int = 300) -> str:
    """A provider error for a log line: its type and the first line of its message, cut."""
    first_line = str(exc).strip().split("\n", 1)[0]
    text = f"{type(exc).__name__}: {first_line}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class LLMCallRecord:
    purpose: str
    tier: str
    requested_group: str
    actual_model: str
    latency_ms: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    fallbacks: tuple[str, ...] = ()  # "group: error" for each group tried before this one
    stream: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ModelToolCall, ...]
    finish_reason: str
    record: LLMCallRecord


@dataclass(frozen=True, slots=True)
class TextChunk:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class StreamDone:
    completion: Completion


StreamEvent = TextChunk | ToolCallChunk | StreamDone


@dataclass
class _Accumulator:
    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str = "stop"
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    finished: bool = False  # a chunk carried the finish reason
    counted: bool = False  # a chunk carried the usage

    @property
    def ended(self) -> bool:
        """LiteLLM sends the usage chunk (`include_usage`) only once it has read the provider's stream
        to its end; with the finish reason before it, nothing the call needs is left."""
        return self.finished and self.counted

    def add(self, chunk: Any) -> list[TextChunk | ToolCallChunk]:
        out: list[TextChunk | ToolCallChunk] = []
        self.model = getattr(chunk, "model", None) or self.model
        usage = getattr(chunk, "usage", None)
        if usage:
            self.counted = True
            self.prompt_tokens = usage.prompt_tokens or self.prompt_tokens
            self.completion_tokens = usage.completion_tokens or self.completion_tokens
        for choice in chunk.choices or ():
            delta = choice.delta
            if getattr(delta, "content", None):
                self.text.append(delta.content)
                out.append(TextChunk(delta.content))
            for call in getattr(delta, "tool_calls", None) or ():
                slot = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                name = call.function.name if call.function else None
                args = (call.function.arguments if call.function else None) or ""
                slot["id"] = call.id or slot["id"]
                slot["name"] = name or slot["name"]
                slot["arguments"] += args
                out.append(ToolCallChunk(call.index, call.id, name, args))
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
                self.finished = True
        return out

    def tool_calls(self) -> tuple[ModelToolCall, ...]:
        return tuple(ModelToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(self.calls.items()))


class LLMClient:
    def __init__(
        self,
        config: ModelConfig,
        policy: TableRoutingPolicy | None = None,
        recorder: Callable[[LLMCallRecord], None] | None = None,
    ) -> None:
        self.config = config
        self.policy = policy or TableRoutingPolicy()
        self.recorder = recorder
        self._groups: ModelGroups | None = None
        self._building = threading.Lock()
        if not config.load_on_first_use:
            self._build_groups()

    @property
    def configured(self) -> bool:
        """A model is configured and usable (under GENWORKER_LLM_LOAD=first_use: not refused so far)."""
        return self._groups is not None or (self.config.load_on_first_use and self.config.state.configured)

    @property
    def loaded(self) -> bool:
        """The model layer is loaded: LiteLLM imported, the groups built."""
        return self._groups is not None

    def _build_groups(self) -> ModelGroups | None:
        """Build the model groups (imports LiteLLM; blocking). A model list LiteLLM refuses leaves the
        client unconfigured, saying why."""
        with self._building:
            config = self.config
            if self._groups is None and config.state.configured:
                try:
                    self._groups = ModelGroups(config.model_list)
                except Exception as exc:  # LiteLLM refuses the model list (e.g. an unknown provider)
                    reason = f"{config.state.source}: LiteLLM rejected the model configuration: {exc}"
                    refused = ModelConfigState(False, config.state.source, reason, error=True)
                    self.config = replace(config, state=refused)
            return self._groups

    async def _loaded_groups(self) -> ModelGroups:
        groups = self._groups or await asyncio.to_thread(self._build_groups)
        if groups is None:
            raise ModelNotConfiguredError(self.config.state.reason)
        return groups

    def _chain(self, intent: LLMCallIntent) -> tuple[Tier, list[str]]:
        if not self.configured:
            raise ModelNotConfiguredError(self.config.state.reason)
        tier = self.policy.tier_for(intent)
        chain = [t for t in self.policy.chain_from(tier) if t in self.config.tier_groups]
        if not chain:  # only lower-precedence tiers missing: climb to any configured group
            chain = [t for t in Tier if t in self.config.tier_groups]
        groups = list(dict.fromkeys(self.config.tier_groups[t] for t in chain))
        return tier, groups

    async def complete(
        self,
        intent: LLMCallIntent,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        tool_choice: Mapping[str, Any] | None = None,
    ) -> Completion:
        completion: Completion | None = None
        async for event in self.stream(intent, messages, tools, tool_choice=tool_choice):
            if isinstance(event, StreamDone):
                completion = event.completion
        assert completion is not None
        return completion

    async def stream(
        self,
        intent: LLMCallIntent,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        tool_choice: Mapping[str, Any] | None = None,  # e.g. force one function
    ) -> AsyncIterator[StreamEvent]:
        tier, groups = self._chain(intent)
        model_groups = await self._loaded_groups()
        failed: list[str] = []
        kwargs: dict[str, Any] = {"messages": list(messages), "stream": True, "stream_options": {"include_usage": True}}
        kwargs["timeout"] = self.config.timeout_s
        if tools:
            kwargs["tools"] = list(tools)
            if tool_choice is not None:
                kwargs["tool_choice"] = dict(tool_choice)
        for group in groups:
            started = time.perf_counter()
            try:
                response = await model_groups.open(group, kwargs)
                iterator = response.__aiter__()
                first = await iterator.__anext__()
            except StopAsyncIteration:
                first = None
            except Exception as exc:
                kind = self._kind(exc)
                fallback = f" ({kind}), {len(groups) - len(failed) - 1} left" if kind else ""
                log.warning("model group %r failed%s: %s", group, fallback, _brief(exc))
                if kind is None:
                    self._record(intent, tier, group, started, failed, error=str(exc))
                    raise self._final_error(exc, (*failed, group)) from exc
                failed.append(f"{group}: {kind}")
                continue
            acc = _Accumulator()
            whole = _litellm_listens()
            try:
                async for event in _read(response, first, iterator, acc, whole=whole):
                    yield event
            except Exception as exc:
                log.warning("model group %r: the stream broke: %s", group, _brief(exc))
                self._record(intent, tier, group, started, failed, error=f"stream broke: {exc}")
                raise ProviderError(
                    self._kind(exc) or "other", f"the model stream broke: {exc}", tried=(*failed, group)
                ) from exc
            if acc.finished and not whole:
                await _close(response)
            record = self._record(intent, tier, group, started, failed, acc=acc)
            yield StreamDone(Completion("".join(acc.text), acc.tool_calls(), acc.finish_reason, record))
            return
        self._record(intent, tier, groups[-1], time.perf_counter(), failed, error="all model groups failed")
        raise ProviderError(
            "rate_limited" if all("rate_limited" in f for f in failed) else "server_error",
            f"every model in the fallback chain failed: {', '.join(failed)}",
            tried=tuple(failed),
        )

    @staticmethod
    def _kind(exc: Exception) -> ProviderErrorKind | None:
        for error_type, kind in _fallback_errors():
            if isinstance(exc, error_type):
                return kind
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and status >= 500:
            return "server_error"
        return None

    @staticmethod
    def _final_error(exc: Exception, tried: tuple[str, ...]) -> ProviderError:
        from litellm import exceptions as llm_errors

        if isinstance(exc, llm_errors.ContextWindowExceededError):
            return ContextOverflowError(str(exc), tried=tried)
        if isinstance(exc, llm_errors.AuthenticationError):
            return ProviderError("auth", f"the model provider rejected the credentials: {exc}", tried=tried)
        if isinstance(exc, llm_errors.BadRequestError):
            return ProviderError("bad_request", f"the model provider rejected the request: {exc}", tried=tried)
        return ProviderError("other", f"model call failed: {exc}", tried=tried)

    def _record(
        self,
        intent: LLMCallIntent,
        tier: Tier,
        group: str,
        started: float,
        failed: list[str],
        *,
        acc: _Accumulator | None = None,
        error: str | None = None,
    ) -> LLMCallRecord:
        cost = _cost(acc.model, acc.prompt_tokens, acc.completion_tokens) if acc is not None and acc.model else None
        record = LLMCallRecord(
            purpose=intent.purpose.value,
            tier=tier.value,
            requested_group=group,
            actual_model=acc.model if acc else "",
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            prompt_tokens=acc.prompt_tokens if acc else 0,
            completion_tokens=acc.completion_tokens if acc else 0,
            cost_usd=cost,
            fallbacks=tuple(failed),
            stream=True,
            error=error,
        )
        record_llm_call(
            record.tier,
            _configured_model(self.config, group),
            record.latency_ms / 1000,
            ok=error is None,
            tokens=record.prompt_tokens + record.completion_tokens,
            cost=cost or 0.0,
        )
        if self.recorder is not None:
            self.recorder(record)
        calls = _RECORDING.get()
        if calls is not None:
            calls.append(record)
        return record


def _litellm_listens() -> bool:
    """Whether success callbacks are configured through LiteLLM's own settings: they are given the
    whole response only when its stream is read to the end."""
    import litellm

    return bool(litellm.callbacks or litellm.success_callback or getattr(litellm, "_async_success_callback", None))


async def _read(
    response: Any, first: Any, iterator: AsyncIterator[Any], acc: _Accumulator, *, whole: bool
) -> AsyncIterator[StreamEvent]:
    """The stream's events, read to its end (`whole`) or up to the chunk that leaves nothing the call
    needs (`acc.ended`); past the finish reason, from the provider's stream where LiteLLM's wrapper
    lets it (`rest_of_stream`)."""
    for chunk in (first,) if first is not None else ():
        for event in acc.add(chunk):
            yield event
    while whole or not acc.ended:
        rest = rest_of_stream(response) if acc.finished and not whole else None
        if rest is not None:
            async for chunk in rest:
                for event in acc.add(chunk):
                    yield event
            return
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        for event in acc.add(chunk):
            yield event


async def _close(response: Any) -> None:
    """Close a stream that has given everything, without asking LiteLLM's wrapper for one more item:
    it would assemble the whole response a second time, price it and start its success logging.
    genworker keeps its own record of the call and reads nothing LiteLLM logs (unless callbacks are
    configured through LiteLLM's settings: the stream is then read to its end). The provider's
    response has been read to its end, so its connection goes back to the pool; the Router's wrapper
    reports nothing for a stream closed early (its `_areported`)."""
    aclose = getattr(response, "aclose", None)
    if aclose is not None:
        await aclose()


def _configured_model(config: ModelConfig, group: str) -> str:
    """The group's configured model (the first deployment's), a stable metrics label."""
    for entry in config.model_list:
        if entry.get("model_name") == group:
            return str(entry.get("litellm_params", {}).get("model") or group)
    return group


_UNPRICED: set[str] = set()


def _cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD cost where LiteLLM knows the model's price (remembered misses: lookups are slow)."""
    if model in _UNPRICED:
        return None
    import litellm

    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # unknown model: LiteLLM has no price for it
        _UNPRICED.add(model)
        return None
    return float(prompt_cost + completion_cost)
