"""OpenTelemetry spans of an agent turn (a scripted stand-in model, real tools, tokenizer and SDK): one
``invoke_agent`` per turn with ``chat`` and ``execute_tool`` children, GenAI / OpenInference / Loom attribute
names, and usage that sums to the turn's ledger to the token."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from loom.orchestrator import Agent, InMemorySession, tracing
from tests.orchestrator.scripted_llm import ScriptedLLM
from tests.orchestrator.test_agent_loop import call


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    yield exporter
    tracing.set_tracer_provider(None)


async def test_a_tool_turn_is_one_agent_span_with_its_calls_and_usage_summing_to_the_ledger(
        tokenizer, tool_set, spans) -> None:
    llm = ScriptedLLM(tokenizer, ["<think>\nadd\n</think>\n\n" + call("add", '{"a": 2, "b": 40}'), "It is 42."])
    agent = Agent(llm, tools=tool_set, system_prompt="Use tools.")
    session = InMemorySession("conv-7")
    result = await agent.arun("what is 2+40?", session=session)
    by_op = {}
    for s in spans.get_finished_spans():
        by_op.setdefault(s.attributes["gen_ai.operation.name"] if "gen_ai.operation.name" in s.attributes
                         else s.attributes.get("loom.step"), []).append(s)
    (turn,) = by_op["invoke_agent"]
    chats, (tool,) = by_op["chat"], by_op["execute_tool"]
    assert turn.name == "invoke_agent loom-agent" and turn.attributes["gen_ai.conversation.id"] == "conv-7"
    assert turn.attributes["loom.final_state"] == "done" and turn.attributes["openinference.span.kind"] == "AGENT"
    assert len(chats) == 2 and all(c.parent.span_id == turn.context.span_id for c in chats)
    assert tool.parent.span_id == turn.context.span_id and tool.name == "execute_tool add"
    assert tool.attributes["gen_ai.tool.name"] == "add" and tool.attributes["gen_ai.tool.call.id"] == \
        result.tool_calls[0].id
    led = result.usage
    assert led.prompt_tokens > 0 and led.cached_tokens > 0 and led.reasoning_tokens > 0  # the second call hits
    for key, value in [("gen_ai.usage.input_tokens", led.prompt_tokens),
                       ("gen_ai.usage.cache_read.input_tokens", led.cached_tokens),
                       ("gen_ai.usage.output_tokens", led.completion_tokens),
                       ("gen_ai.usage.reasoning.output_tokens", led.reasoning_tokens),
                       ("llm.token_count.total", led.total_tokens)]:
        assert turn.attributes[key] == value
        assert sum(c.attributes[key] for c in chats) == value  # the calls add up to the turn, to the token
    for name, usage in led.prompt.items():  # Loom's classes, cached and computed apart
        if usage.tokens:
            assert turn.attributes[f"loom.tokens.{name}.cached"] == usage.cached_tokens
            assert turn.attributes[f"loom.tokens.{name}.computed"] == usage.computed_tokens
    assert turn.attributes["loom.tokens.tool_call.computed"] == led.output["tool_call"].tokens > 0
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert chats[0].attributes["gen_ai.response.time_to_first_chunk"] >= 0


async def test_a_failed_tool_call_is_an_error_span(tokenizer, tool_set, spans) -> None:
    llm = ScriptedLLM(tokenizer, [call("explode", '{"text": "x"}'), "sorry"])
    await Agent(llm, tools=tool_set).arun("break it")
    (tool,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool explode"]
    assert tool.status.status_code == StatusCode.ERROR and "kaboom" in tool.status.description


async def test_without_a_provider_spans_do_not_record_and_an_agent_runs(tokenizer, tool_set) -> None:
    # the OpenTelemetry API's default provider is a no-op: traces are off unless an application turns them on
    span = tracing.agent_span("loom-agent", "c", None)
    assert not span.is_recording()
    span.end()
    llm = ScriptedLLM(tokenizer, ["plain answer"])
    result = await Agent(llm, tools=tool_set).arun("hi")
    assert result.answer == "plain answer"


def test_configuring_otlp_without_the_exporter_names_the_extra_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)  # not installed
    monkeypatch.setattr(tracing, "_otlp_configured", False)
    with pytest.raises(RuntimeError, match=r"loom-llm\[otel\]"):
        tracing.configure_otlp("http://127.0.0.1:4318/v1/traces")
