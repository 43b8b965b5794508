"""``LoomLlamaLLM`` under LlamaIndex: LlamaIndex's own query-engine example (``Settings.llm``,
``RetrieverQueryEngine.from_args``) runs over Loom's index and the real default model; chat
goes through the model's chat template; complete, chat, their async and streamed forms agree;
with ``AsyncLLM`` a stream arrives token by token."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.query_engine import RetrieverQueryEngine

from loom.orchestrator.llamaindex import LoomLlamaLLM
from loom.retrieval.llamaindex import LoomLlamaRetriever

ASK = [ChatMessage(role=MessageRole.SYSTEM, content="Answer in one short sentence."),
       ChatMessage(role=MessageRole.USER, content="What is a queue?")]


@pytest.fixture(scope="module")
def engine(real_model: Path):
    """Float32, the exact engine: the forms' greedy texts must agree although the later calls find their
    prompt in the prefix cache (quantized kernels' rows may round differently with the rows beside them)."""
    from loom.runtime import LLM

    return LLM(str(real_model), max_model_len=2048)


@pytest.fixture
def llm(engine) -> LoomLlamaLLM:
    return LoomLlamaLLM(llm=engine, max_tokens=16, model_name="smollm2-135m-instruct")


def test_metadata_reports_the_engine_window_and_a_chat_model(llm: LoomLlamaLLM) -> None:
    meta = llm.metadata
    assert (meta.context_window, meta.num_output, meta.is_chat_model) == (2048, 16, True)
    assert meta.model_name == "smollm2-135m-instruct"


def test_chat_prompt_is_the_models_chat_template(llm: LoomLlamaLLM, engine) -> None:
    r = llm.chat(ASK)
    text = engine.tokenizer.apply_chat_template([{"role": m.role.value, "content": m.content} for m in ASK],
                                                add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nAnswer in one short sentence.<|im_end|>")
    assert r.additional_kwargs["prompt_tokens"] == len(engine.tokenizer.encode(text, add_special_tokens=False))
    assert r.message.role == MessageRole.ASSISTANT and r.message.content.strip()
    assert 0 < r.additional_kwargs["completion_tokens"] <= 16
    assert r.additional_kwargs["finish_reason"] in ("stop", "length")
    # the same conversation again: everything but the last partial block comes from the prefix cache
    assert llm.chat(ASK).additional_kwargs["cached_tokens"] > 0


async def test_complete_chat_async_and_streamed_forms_agree(llm: LoomLlamaLLM) -> None:
    user = [ChatMessage(role=MessageRole.USER, content="Name a colour.")]
    text = llm.complete("Name a colour.").text
    assert text and llm.chat(user).message.content == text  # complete = one user message
    assert (await llm.achat(user)).message.content == text
    assert (await llm.acomplete("Name a colour.")).text == text
    streamed = list(llm.stream_chat(user))
    assert "".join(s.delta for s in streamed) == streamed[-1].message.content == text
    assert [s.text async for s in await llm.astream_complete("Name a colour.")][-1] == text


def test_llamaindex_query_engine_example_runs_over_loom_index_and_model(engine, retriever) -> None:
    debug = LlamaDebugHandler()
    loom_retriever = LoomLlamaRetriever(retriever, similarity_top_k=2)
    saved = Settings._llm, Settings._callback_manager
    try:
        # LlamaIndex's docs: set the global LLM (and callbacks), build a query engine from a retriever, query it
        Settings.llm = LoomLlamaLLM(llm=engine, max_tokens=24)
        Settings.callback_manager = CallbackManager([debug])
        query_engine = RetrieverQueryEngine.from_args(loom_retriever)
        response = query_engine.query("What does put() do when the queue is full?")
    finally:
        Settings._llm, Settings._callback_manager = saved
    assert isinstance(response.response, str) and response.response.strip()
    want = [n.node.node_id for n in loom_retriever.retrieve("What does put() do when the queue is full?")]
    assert [n.node.node_id for n in response.source_nodes] == want
    (start, _end), = debug.get_event_pairs(CBEventType.LLM)
    sent = "\n".join(m.content for m in start.payload["messages"])
    assert "put() waits when the queue is full" in sent and "title: Queues" in sent


@pytest.fixture(scope="module")
def tiny_async(tiny_checkpoint):
    from loom.runtime import AsyncLLM

    engine = AsyncLLM(str(tiny_checkpoint()), max_model_len=512)
    yield engine
    engine.shutdown()


def test_stream_with_async_engine_arrives_token_by_token(tiny_async) -> None:
    llm = LoomLlamaLLM(llm=tiny_async, max_tokens=12)
    steps = list(llm.stream_complete("hello", temperature=0.0))
    deltas = [s.delta for s in steps if s.delta]
    assert len(deltas) > 3 and "".join(deltas) == steps[-1].text
    assert steps[-1].additional_kwargs["completion_tokens"] == 12
    assert steps[-1].additional_kwargs["finish_reason"] == "length"
