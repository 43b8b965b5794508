"""``LLM.generate``'s prompts as vLLM takes them: strings, ``TextPrompt`` and ``TokensPrompt`` dicts, mixed."""

from __future__ import annotations

import pytest

from loom.runtime import LLM, TextPrompt, TokensPrompt
from tests.runtime.helpers import greedy


@pytest.fixture(scope="module")
def llm(tiny_checkpoint) -> LLM:
    return LLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=128, max_model_len=512)


def test_text_and_token_prompt_dicts_generate_what_a_string_and_prompt_token_ids_do(llm):
    text = "The capital of France is"
    ids = llm.tokenizer.encode(text)
    (by_text,) = llm.generate(text, greedy(6), use_tqdm=False)
    (by_ids,) = llm.generate(prompt_token_ids=ids, sampling_params=greedy(6), use_tqdm=False)
    mixed = llm.generate([TokensPrompt(prompt_token_ids=ids), TextPrompt(prompt=text), text], greedy(6),
                         use_tqdm=False)
    assert by_text.token_ids == by_ids.token_ids
    assert [o.prompt_token_ids for o in mixed] == [ids] * 3
    assert [o.token_ids for o in mixed] == [by_text.token_ids] * 3
    assert llm.get_tokenizer() is llm.tokenizer  # vLLM's accessor for the tokenizer text prompts go through
    (single,) = llm.generate({"prompt_token_ids": ids}, greedy(6))  # one dict, not a list of them
    assert single.token_ids == by_text.token_ids


@pytest.mark.parametrize(("prompt", "message"), [
    ({"prompt": "hi", "prompt_token_ids": [1]}, "must be a string, {'prompt': str}"),
    ({}, "must be a string, {'prompt': str}"),
    (42, "must be a string, {'prompt': str}"),
    ({"prompt": "hi", "multi_modal_data": {"image": None}}, "'multi_modal_data' is not supported"),
    ({"prompt": b"hi"}, "'prompt' must be a string"),
    ({"prompt_token_ids": "12"}, "'prompt_token_ids' must be a list of ints"),
    ({"prompt_token_ids": [1, 2.0]}, "'prompt_token_ids' must be a list of ints"),
])
def test_a_malformed_prompt_is_refused_by_its_position_before_anything_is_submitted(llm, prompt, message):
    with pytest.raises(ValueError, match=r"prompts\[1\]: " + message.replace("[", r"\[").replace("{", r"\{")):
        llm.generate(["fine", prompt], greedy(4))
    assert not llm.engine.has_unfinished_requests()


def test_async_generate_takes_vllms_positional_prompt_as_the_sync_engine_does(tiny_checkpoint, llm):
    import asyncio

    from loom.runtime import AsyncLLM, EngineConfig

    text = "The capital of France is"
    (ref,) = llm.generate(text, greedy(6), use_tqdm=False)
    allm = AsyncLLM.from_config(EngineConfig(model=str(tiny_checkpoint("qwen3")), num_kv_blocks=128, max_model_len=512))

    async def last(prompt) -> list[int]:
        outs = [o async for o in allm.generate(prompt, greedy(6), "r1")]  # vLLM: (prompt, sampling_params, id)
        return outs[-1].token_ids

    async def refused() -> None:
        async for _ in allm.generate({"prompt": text, "multi_modal_data": {}}, greedy(6)):
            pass

    try:
        assert asyncio.run(allm.get_tokenizer()).encode(text) == ref.prompt_token_ids  # vLLM awaits it
        assert asyncio.run(last(text)) == ref.token_ids
        assert asyncio.run(last(TokensPrompt(prompt_token_ids=ref.prompt_token_ids))) == ref.token_ids
        with pytest.raises(ValueError, match="prompt: 'multi_modal_data' is not supported"):
            asyncio.run(refused())
    finally:
        allm.shutdown()
