"""OpenTelemetry traces of agent turns, carrying the token-class ledger.

Spans, named and attributed as the OpenTelemetry GenAI semantic conventions define them
(``gen_ai.*``; the agent and tool spans of their "agent spans" page, the inference span of
their "spans" page):

* ``invoke_agent {agent}``, one per turn (:class:`~loom.orchestrator.runner.TurnRunner`):
  ``gen_ai.operation.name="invoke_agent"``, ``gen_ai.agent.name``, ``gen_ai.conversation.id``
  (the session id), ``gen_ai.request.model``, and the turn's summed usage at its end;
* ``chat {model}``, one per model call, a child of its turn: the request's ``max_tokens`` and
  ``temperature``, ``gen_ai.response.finish_reasons``, ``gen_ai.response.time_to_first_chunk``
  (s, the call's TTFT) and its usage;
* ``execute_tool {tool}``, one per tool call: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.type="function"``, an error status when the result is an error;
* ``retrieval`` and ``memory``, the turn's search steps (``loom.step``; no convention names them yet);
* ``chat {model}`` for each ``/v1/chat/completions`` request too (:func:`record_chat`), a server span
  recorded when the request ends, with ``gen_ai.response.id``.

Usage attributes, set once when a call or turn ends, from its :class:`~loom.orchestrator.ledger.Ledger`
(nothing runs per token):

* GenAI: ``gen_ai.usage.input_tokens`` (cached tokens included, as the convention requires),
  ``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.usage.reasoning.output_tokens``;
* OpenInference (Arize Phoenix reads these): ``openinference.span.kind`` (``AGENT``, ``LLM``,
  ``TOOL``, ``RETRIEVER``), ``llm.token_count.prompt`` / ``completion`` / ``total``,
  ``llm.token_count.prompt_details.cache_read``, ``llm.token_count.completion_details.reasoning``;
* Loom's classes, which no standard has: ``loom.tokens.<class>.cached`` and ``.computed`` for every
  prompt class with tokens (``system``, ``history``, ``retrieval``, ...), ``loom.tokens.<class>.computed``
  for every output class (``reasoning``, ``tool_call``, ``output``, ...), ``loom.cost.<class>`` and
  ``loom.cost.total`` (USD, the agent's ``PriceTable``).

Off by default: spans go to the OpenTelemetry API's global tracer provider, a no-op until an SDK
provider is installed, by the application or by :func:`configure_otlp` (``loom serve
--otlp-traces-endpoint``, vLLM's flag). Spans are started with an explicit parent and never made
current, so an agent's async generators can be suspended and resumed in other contexts safely.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from loom.orchestrator.ledger import Ledger

log = logging.getLogger(__name__)
INSTRUMENTATION = "loom.orchestrator"
_provider: trace.TracerProvider | None = None  # set_tracer_provider's; None: the global one
_otlp_configured = False  # configure_otlp ran in this process


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Send Loom's spans to ``provider`` rather than the global tracer provider (``None``: back to the global
    one). For an application that keeps several providers, and for tests."""
    global _provider
    _provider = provider


def _tracer() -> trace.Tracer:
    return (_provider or trace.get_tracer_provider()).get_tracer(INSTRUMENTATION)


def start_span(name: str, parent: Span | None, attributes: Mapping[str, Any], kind: SpanKind = SpanKind.INTERNAL) -> Span:
    """A started span (not made current), the child of ``parent`` when given."""
    context = trace.set_span_in_context(parent) if parent is not None else None
    return _tracer().start_span(name, context=context, kind=kind, attributes=dict(attributes))


def agent_span(agent: str, conversation_id: str | None, model: str | None) -> Span:
    """The turn's ``invoke_agent`` span."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                             "openinference.span.kind": "AGENT"}
    if conversation_id:
        attrs["gen_ai.conversation.id"] = conversation_id
    if model:
        attrs["gen_ai.request.model"] = model
    return start_span(f"invoke_agent {agent}", None, attrs)


def chat_span(parent: Span | None, model: str | None, max_tokens: int, temperature: float) -> Span:
    """One model call's ``chat`` span (a client span: the engine serves it)."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.max_tokens": max_tokens,
                             "gen_ai.request.temperature": temperature, "openinference.span.kind": "LLM"}
    if model:
        attrs["gen_ai.request.model"] = model
    return start_span(f"chat {model or 'model'}", parent, attrs, SpanKind.CLIENT)


def end_chat(span: Span, ledger: Ledger, finish_reason: str | None) -> None:
    """Record a call's usage and outcome on its span and end it."""
    span.set_attributes(usage_attributes(ledger))
    span.set_attribute("gen_ai.response.time_to_first_chunk", ledger.ttft_ms / 1000.0)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    span.end()


@contextmanager
def tool_span(parent: Span | None, name: str, call_id: str) -> Iterator[Span]:
    """One tool call's ``execute_tool`` span; the caller sets an error status on an error result."""
    span = start_span(f"execute_tool {name}", parent, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function", "openinference.span.kind": "TOOL"})
    try:
        yield span
    finally:
        span.end()


@contextmanager
def step_span(parent: Span | None, step: str) -> Iterator[Span]:
    """A retrieval or memory search of the turn."""
    span = start_span(step, parent, {"loom.step": step, "openinference.span.kind": "RETRIEVER"})
    try:
        yield span
    finally:
        span.end()


def set_error(span: Span, message: str) -> None:
    span.set_status(Status(StatusCode.ERROR, message[:200]))


def token_attributes(prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, int | float]:
    """Token counts under the GenAI and OpenInference names (``prompt`` includes ``cached``)."""
    return {
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.cache_read.input_tokens": cached,
        "gen_ai.usage.output_tokens": completion,
        "gen_ai.usage.reasoning.output_tokens": reasoning,
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": completion,
        "llm.token_count.total": prompt + completion,
        "llm.token_count.prompt_details.cache_read": cached,
        "llm.token_count.completion_details.reasoning": reasoning,
    }


def usage_attributes(ledger: Ledger) -> dict[str, int | float]:
    """A ledger's usage under the GenAI, OpenInference and Loom attribute names (see the module docstring)."""
    attrs = token_attributes(ledger.prompt_tokens, ledger.cached_tokens, ledger.completion_tokens,
                             ledger.reasoning_tokens)
    attrs["loom.cost.total"] = ledger.cost
    for name, usage in ledger.prompt.items():
        if usage.tokens:
            attrs[f"loom.tokens.{name}.cached"] = usage.cached_tokens
            attrs[f"loom.tokens.{name}.computed"] = usage.computed_tokens
            attrs[f"loom.cost.{name}"] = usage.cost
    for name, out in ledger.output.items():
        if out.tokens:
            attrs[f"loom.tokens.{name}.computed"] = out.tokens
            attrs[f"loom.cost.{name}"] = out.cost
    return attrs


def record_chat(model: str, response_id: str, start_ns: int, request: Mapping[str, Any], tokens: Mapping[str, int],
                classes: Mapping[str, int], ttft_s: float | None, finish_reasons: list[str]) -> None:
    """One ``/v1/chat/completions`` request as a finished ``chat`` span (made when the request ends, from its
    counts: nothing per token).

    Args:
        model: the served model name. response_id: the completion's id. start_ns: when the request arrived
            (``time.time_ns()``). request: ``gen_ai.request.*`` attributes (``max_tokens``, ``temperature``).
        tokens: ``prompt``, ``cached``, ``completion``, ``reasoning`` counts (``prompt`` includes ``cached``).
        classes: Loom's counts by class (``prompt.cached``, ``prompt.computed``, ``reasoning``, ``tool_call``,
            ``output``). ttft_s: the first choice's time to first token. finish_reasons: one per choice.
    """
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                             "gen_ai.response.id": response_id, "openinference.span.kind": "LLM",
                             "gen_ai.response.finish_reasons": finish_reasons,
                             **{f"gen_ai.request.{k}": v for k, v in request.items() if v is not None},
                             **token_attributes(tokens["prompt"], tokens["cached"], tokens["completion"],
                                                tokens["reasoning"])}
    for name, count in classes.items():
        if count:
            attrs[f"loom.tokens.{name}" if name.startswith("prompt.") else f"loom.tokens.{name}.computed"] = count
    if ttft_s is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = ttft_s
    span = _tracer().start_span(f"chat {model}", kind=SpanKind.SERVER, attributes=attrs, start_time=start_ns)
    span.end()


def configure_otlp(endpoint: str | None = None, service_name: str = "loom") -> bool:
    """Install an SDK tracer provider that exports Loom's spans over OTLP/HTTP (batched), as the global provider.

    Args:
        endpoint: the collector's traces URL (``http://host:4318/v1/traces``); ``None``: the standard
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables decide.
        service_name: ``service.name`` of the resource.

    Returns:
        ``True`` once installed (a second call does nothing and returns ``False``).

    Raises:
        RuntimeError: the OpenTelemetry SDK or its OTLP exporter is not installed (``pip install
            'loom-llm[otel]'``).
    """
    global _otlp_configured
    if _otlp_configured:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError("traces need the OpenTelemetry SDK and its OTLP exporter: "
                           "pip install 'loom-llm[otel]'") from exc
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint) if endpoint
                                                   else OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _otlp_configured = True
    log.info("exporting traces over OTLP to %s", endpoint or "the OTEL_EXPORTER_OTLP_* endpoint")
    return True
