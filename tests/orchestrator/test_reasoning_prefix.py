"""With the Agent's default ``keep_reasoning=False``, a model that reasons still gets
append-only prompts: turn 2's prompt starts with turn 1's prompt plus its reply, token
for token, and the engine's prefix cache serves that history.

Real engine (``AsyncLLM``, random-weight qwen3 tiny preset, prefix caching on) whose
logits are forced to scripted replies that open with ``<think>...</think>`` (a scripted
reply, named as such: random weights do not reason on their own).
"""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, InMemorySession

REPLIES = ["<think>\nThe user says hello. A short greeting back is enough here.\n</think>\n\nHello! How can I help?",
           "<think>\nA second short answer.\n</think>\n\nSure, ask away."]
BLOCK = 16


@pytest.fixture(scope="module")
def reasoning_llm():
    from loom.runtime import AsyncLLM
    from loom.runtime.checkpoint import ensure_checkpoint

    engine = AsyncLLM(str(ensure_checkpoint("qwen3", "tiny")), max_model_len=2048, block_size=BLOCK)
    tok = engine.tokenizer
    end = tok.convert_tokens_to_ids(tok.eos_token)
    scripts = [tok(r, add_special_tokens=False)["input_ids"] + [end] for r in REPLIES]
    order: dict[str, int] = {}

    def scripted(logits, rows) -> None:  # the i-th request writes the i-th reply
        for i, req in enumerate(rows):
            script = scripts[order.setdefault(req.request_id, len(order)) % len(scripts)]
            n = len(req.output_token_ids)
            keep = logits[i, script[min(n, len(script) - 1)]].clone()
            logits[i].fill_(float("-inf"))
            logits[i, script[min(n, len(script) - 1)]] = keep

    engine.engine.logits_processors.append(scripted)
    yield engine, scripts
    engine.shutdown()


async def test_default_agent_prompt_extends_the_previous_prompt_and_its_reasoning_reply(reasoning_llm) -> None:
    llm, scripts = reasoning_llm
    agent = Agent(llm, system_prompt="You are brief.", max_steps=1)
    assert agent.builder.keep_reasoning is False  # the default under test
    session = InMemorySession()
    first = await agent.arun("hello", session=session)
    assert first.final_state == "done" and "Hello!" in first.answer and first.reasoning
    assert first.usage.reasoning_tokens > 0
    first_prompt = agent.builder.build(session.get_items()[:1], 1).token_ids
    second = await agent.arun("one more question", session=session)
    assert second.final_state == "done" and second.answer == "Sure, ask away."
    second_prompt = agent.builder.build(session.get_items()[:-1], 2).token_ids
    assert second_prompt[: len(first_prompt) + len(scripts[0])] == first_prompt + scripts[0]
    # everything up to the reply's last token was computed before: only the last partial block is not cached
    history = second.usage.prompt["history"]
    assert history.tokens > len(scripts[0])
    assert history.computed_tokens < BLOCK + 2, (history.cached_tokens, history.tokens)
