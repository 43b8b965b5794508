"""``LLM.chat`` (vLLM's): conversations rendered by the model's own chat template, then generated."""

from __future__ import annotations

import pytest

from loom.runtime import LLM
from tests.runtime.helpers import greedy

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]


def _template_ids(llm: LLM, messages: list, **kwargs) -> list[int]:
    text = llm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return llm.tokenizer.encode(text, add_special_tokens=False)


def test_chat_generates_from_the_templates_rendering_of_each_conversation_in_order(tiny_checkpoint):
    llm = LLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=128, max_model_len=512)
    other = [{"role": "user", "content": "And a square?"}]
    one, two = llm.chat([CONVERSATION, other], greedy(6), use_tqdm=False)
    (ref,) = llm.generate(prompt_token_ids=_template_ids(llm, CONVERSATION), sampling_params=greedy(6))
    assert one.prompt_token_ids == ref.prompt_token_ids and one.token_ids == ref.token_ids
    assert two.prompt_token_ids == _template_ids(llm, other)
    assert llm.chat(CONVERSATION, greedy(6))[0].token_ids == ref.token_ids  # one conversation, not a list of them
    # template variables reach the template: Qwen3's enable_thinking=False closes an empty think block
    (plain,) = llm.chat(CONVERSATION, greedy(1), chat_template_kwargs={"enable_thinking": False})
    assert plain.prompt_token_ids == _template_ids(llm, CONVERSATION, enable_thinking=False)
    assert "</think>" in llm.tokenizer.decode(plain.prompt_token_ids)


@pytest.mark.parametrize("messages", [[], [[]], "hi", [CONVERSATION[0], "hi"], [CONVERSATION, "hi"]])
def test_chat_refuses_what_is_not_a_conversation_before_submitting_anything(tiny_checkpoint, messages):
    llm = LLM(str(tiny_checkpoint("qwen3")), num_kv_blocks=128, max_model_len=512)
    with pytest.raises(ValueError, match="messages: give a list"):
        llm.chat(messages, greedy(4))
    assert not llm.engine.has_unfinished_requests()
