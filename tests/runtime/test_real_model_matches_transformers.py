"""The real default model (SmolLM2-135M-Instruct, converted from its GGUF) through the
engine equals transformers loading the same folder, token for token, greedy float32:
one request, 16 concurrent chats sharing a system prompt (served from the prefix
cache), chunked prefill and preemption. Prompts are real chat-template renderings.

The tests share their transformers references (``hf_greedy`` cuts a longer run made for the same
prompt), so the long runs come first: the file makes 224 reference tokens rather than 308."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.runtime.helpers import assert_pool_idle, greedy, hf_greedy, make_engine, run_to_completion

SYSTEM = ("You are a helpful assistant that answers questions about the Python standard library. "
          "Answer in one or two sentences and name the function you mean.")
QUESTIONS = [
    "What does os.path.join do?", "How do I sort a list in reverse?", "What is a dict comprehension?",
    "How do I read a JSON file?", "What does enumerate return?", "How do I get the current time?",
    "What is the difference between a list and a tuple?", "How can I remove duplicates from a list?",
    "What does zip do?", "How do I open a file for appending?", "What is functools.lru_cache?",
    "How do I split a string on commas?", "What does the with statement do?", "How do I make a set?",
    "What does range(3) produce?", "How do I check if a key is in a dict?",
]


@pytest.fixture(scope="module")
def chats(real_model):
    tok = AutoTokenizer.from_pretrained(str(real_model))

    def render(q: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                                       add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    return [render(q) for q in QUESTIONS]


def test_single_chat_prompt_matches_transformers(real_model, chats):
    engine = make_engine(real_model)
    out = run_to_completion(engine, [("r", chats[0], greedy(24))])["r"]
    assert out.token_ids == hf_greedy(real_model, chats[0], 24)
    assert_pool_idle(engine)


def test_small_pool_preempts_real_chats_and_output_is_unchanged(real_model, chats):
    engine = make_engine(real_model, num_kv_blocks=16, enable_prefix_caching=False)
    prompts = chats[4:9]
    outs = run_to_completion(engine, [(f"r{i}", p, greedy(24)) for i, p in enumerate(prompts)])
    assert engine.stats()["num_preemptions"] > 0
    for i, p in enumerate(prompts):
        assert outs[f"r{i}"].token_ids == hf_greedy(real_model, p, 24)
    assert_pool_idle(engine)


def test_chunked_prefill_of_real_chats_matches_transformers(real_model, chats):
    engine = make_engine(real_model, max_num_batched_tokens=24)
    prompts = chats[4:7]  # the preemption test's chats: their references are made already
    outs = run_to_completion(engine, [(f"r{i}", p, greedy(12)) for i, p in enumerate(prompts)])
    assert engine.num_steps >= sum(len(p) for p in prompts) // 24  # prompts were cut into chunks
    for i, p in enumerate(prompts):
        assert outs[f"r{i}"].token_ids == hf_greedy(real_model, p, 12)
    assert_pool_idle(engine)


def test_16_concurrent_chats_sharing_a_system_prompt_hit_the_cache_and_match(real_model, chats):
    engine = make_engine(real_model)
    first = run_to_completion(engine, [("warm", chats[0], greedy(8))])["warm"]
    assert first.num_cached_tokens == 0
    outs = run_to_completion(engine, [(f"r{i}", p, greedy(8)) for i, p in enumerate(chats)])
    for i, prompt in enumerate(chats):
        common = next((k for k, (a, b) in enumerate(zip(prompt, chats[0])) if a != b), len(prompt) - 1)
        # every token of the shared system turn is served from the cache: full blocks in place, and the
        # leading tokens of the block it diverges in by copy when the warm-up's prompt and reply filled
        # that block; r0, the warm-up's own prompt and admitted first, takes the warm-up's partial last
        # block in place (all but its last token), so the others get only the full blocks before it
        warm_full_blocks = (len(chats[0]) + 8 - 1) // 16
        if i == 0:
            expected = len(prompt) - 1
        elif common // 16 < warm_full_blocks:
            expected = common
        else:
            expected = common // 16 * 16
        assert outs[f"r{i}"].num_cached_tokens == expected > 0, f"r{i}"
        assert outs[f"r{i}"].token_ids == hf_greedy(real_model, prompt, 8), f"r{i}: {QUESTIONS[i]}"
    assert_pool_idle(engine)
