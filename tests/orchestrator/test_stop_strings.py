"""Stop strings reach every agent-side consumer through the engine's one detokenizer.

Real default model (SmolLM2-135M-Instruct), greedy: the reply without a stop
string has spaces; with ``stop=[" "]`` the text ends before the first one,
whether it is read through ``LoomChatModel.invoke`` or streamed by the Agent.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from loom.orchestrator import Agent
from loom.orchestrator.events import ContentDelta, DoneEvent
from loom.orchestrator.langchain import LoomChatModel
from loom.runtime.sampling_params import SamplingParams

QUESTION = "Describe the sea in one sentence."


@pytest.fixture(scope="module")
def smol_llm(real_model):
    from loom.runtime import AsyncLLM

    engine = AsyncLLM(str(real_model), max_model_len=1024)
    yield engine
    engine.shutdown()


def test_invoke_with_a_space_stop_returns_the_text_before_the_first_space(smol_llm) -> None:
    full = LoomChatModel(llm=smol_llm, max_tokens=24).invoke([HumanMessage(QUESTION)])
    assert " " in full.content.strip()  # else the stop could not cut anything
    cut = LoomChatModel(llm=smol_llm, max_tokens=24).invoke([HumanMessage(QUESTION)], stop=[" "])
    assert " " not in cut.content and cut.content
    assert full.content.startswith(cut.content)
    assert cut.response_metadata["finish_reason"] == "stop"
    assert cut.usage_metadata["output_tokens"] < full.usage_metadata["output_tokens"]


async def test_streamed_agent_text_ends_before_the_stop_string(smol_llm) -> None:
    free = await Agent(smol_llm, budget=None, max_steps=1).arun(QUESTION)
    assert " " in free.answer
    agent = Agent(smol_llm, max_steps=1, sampling=SamplingParams(temperature=0.0, stop=[" "]))
    streamed, result = "", None
    async for ev in agent.stream(QUESTION):
        if isinstance(ev, ContentDelta):
            streamed += ev.text
        elif isinstance(ev, DoneEvent):
            result = ev.result
    assert result is not None and result.final_state == "done"
    assert " " not in streamed and streamed and free.answer.startswith(streamed.strip())
    assert result.answer == streamed.strip()
