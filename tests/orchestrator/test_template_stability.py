"""Template stability: turn N+1's prompt begins with exactly turn N's prompt plus its reply.

Runs a multi-turn session with retrieval, memory, reasoning and (parallel)
tool calls through the ContextBuilder over the tokenizer and chat template of
each checkpoint Loom ships.  The replies are the template's own rendering of
assistant messages, so the assembled ids must also equal the tokenization of
the template rendering of the whole conversation.
"""

from __future__ import annotations

import pytest

from loom.orchestrator import compaction_plan as comp
from loom.orchestrator.agent import DEFAULT_KEEP_REASONING
from loom.orchestrator.budget import ContextBudget
from loom.orchestrator.context import ContextBuilder
from loom.orchestrator.events import ToolResultRecord
from loom.orchestrator.items import format_retrieval, to_message

TOOLS = sorted([
    {"type": "function", "function": {"name": "search_documents", "description": "Search the docs.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                     "required": ["query"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add.",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "integer"}, "b": {"type": "integer"}}}}},
], key=lambda t: t["function"]["name"])


class _Hit:
    def __init__(self, text: str, document: str, section: str) -> None:
        self.text, self.document, self.section = text, document, section


def _reply_ids(builder: ContextBuilder, items: list, message: dict) -> list[int]:
    """What a model that writes the template's own rendering of ``message`` generates."""
    r = builder.renderer
    prev = builder.messages(items)
    text = r.render(prev + [message])[len(r.render(prev)):]
    gen = r.tokenizer.decode(builder.gen_prompt_ids, skip_special_tokens=False)
    assert text.startswith(gen) and text.endswith("<|im_end|>\n")
    return r.encode(text[len(gen):-1])  # without the trailing "\n": the template adds it


def _assistant(builder, items, turn, **msg):
    message = {"role": "assistant", **msg}
    ids = _reply_ids(builder, items, message)
    item = builder.assistant_item(turn, ids, content=msg.get("content", ""),
                                  reasoning_content=msg.get("reasoning_content"), tool_calls=msg.get("tool_calls"))
    return item, ids


def _tool_call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


@pytest.fixture(params=["llama", "qwen2", "qwen3", "mistral"])
def shipped_tokenizer(request):
    from transformers import AutoTokenizer

    from loom.runtime.checkpoint import ensure_checkpoint

    return AutoTokenizer.from_pretrained(ensure_checkpoint(request.param, "tiny"))


def test_each_prompt_starts_with_previous_prompt_plus_reply_with_the_agents_default_reasoning(
        shipped_tokenizer) -> None:
    """Every reply reasons, and the builder runs with the Agent's default ``keep_reasoning``
    (False), so a prompt that dropped earlier reasoning would not extend the previous one."""
    assert DEFAULT_KEEP_REASONING is False
    b = ContextBuilder(shipped_tokenizer, "You are a careful assistant.", TOOLS, ContextBudget(max_model_len=8192),
                       keep_reasoning=DEFAULT_KEEP_REASONING)
    items: list = []
    items.append(b.snapshot_item(items, ["The user's name is Ada.", "Ada prefers metric units."]))
    prev_prompt: list[int] | None = None
    prev_reply: list[int] = []
    for turn in range(1, 5):
        hits = [_Hit(f"chunk {turn} about asyncio", "asyncio.md", "Tasks")] if turn % 2 else []
        items += b.turn_items(items, turn, f"Question number {turn}: how do tasks work?", hits,
                              memories=["Ada likes tea."] if turn == 3 else [])
        for step in range(2):
            ctx = b.build(items, turn)
            if prev_prompt is not None:
                expect = prev_prompt + prev_reply
                assert ctx.token_ids[: len(expect)] == expect
            ref = b.renderer.encode(b.renderer.render(b.messages(items), add_generation_prompt=True))
            assert ctx.token_ids == ref  # equal to the template's rendering of the whole conversation
            assert [s for s in ctx.segments if s.end > s.start][0].start == 0
            assert sum(s.end - s.start for s in ctx.segments) == len(ctx.token_ids)
            if step == 0:
                calls = [_tool_call(f"c{turn}a", "add", {"a": turn, "b": 1}),
                         _tool_call(f"c{turn}b", "search_documents", {"query": "tasks"})]
                item, reply = _assistant(b, items, turn, reasoning_content=f"think {turn}", content="",
                                         tool_calls=calls)
                items.append(item)
                items += b.tool_items(items, turn, [
                    ToolResultRecord(f"c{turn}a", "add", str(turn + 1), False, step),
                    ToolResultRecord(f"c{turn}b", "search_documents", "Tasks run coroutines.", False, step)])
            else:
                item, reply = _assistant(b, items, turn, reasoning_content="done", content=f"Answer {turn}.")
                items.append(item)
            prev_prompt, prev_reply = ctx.token_ids, item["token_ids"][len(b.gen_prompt_ids):]
            assert item["token_ids"] == b.gen_prompt_ids + reply + b.renderer.trailer()


def test_segments_carry_the_classes_of_architecture_order(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "Be brief.", TOOLS, ContextBudget(max_model_len=4096))
    items: list = []
    items.append(b.snapshot_item(items, ["fact one"]))
    items += b.turn_items(items, 1, "q1", [_Hit("doc text", "d.md", "S")])
    item, _ = _assistant(b, items, 1, content="a1")
    items.append(item)
    items += b.turn_items(items, 2, "q2", [_Hit("other", "d.md", "T")], memories=["new fact"])
    ctx = b.build(items, 2)
    order = [c for c, _, _ in ctx.spans()]
    assert order == ["system", "tools", "system", "memory", "history", "retrieval", "memory", "user"]
    decoded: dict[str, str] = {}
    for c, s, e in ctx.spans():
        decoded[c] = decoded.get(c, "") + tokenizer.decode(ctx.token_ids[s:e], skip_special_tokens=False)
    assert "Be brief." in decoded["system"] and "<tools>" in decoded["tools"]
    assert "doc text" not in decoded["retrieval"] and "other" in decoded["retrieval"]
    assert decoded["user"].startswith("<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n")


def test_reasoning_stays_in_the_prompt_until_a_compaction_then_only_the_think_block_goes(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "", None, ContextBudget(max_model_len=4096), keep_reasoning=False)
    items = b.turn_items([], 1, "hi")
    first = b.build(items, 1).token_ids
    ids = tokenizer("<think>\nlong thoughts\n</think>\n\nHello!<|im_end|>", add_special_tokens=False)["input_ids"]
    think_end = ids.index(tokenizer.convert_tokens_to_ids("</think>"))
    mask = [i <= think_end for i in range(len(ids))]
    item = b.assistant_item(1, ids, reasoning_mask=mask, content="Hello!", reasoning_content="long thoughts")
    items.append(item)
    items += b.turn_items(items, 2, "again")
    second = b.build(items, 2).token_ids
    assert second[: len(first) + len(ids)] == first + ids  # append-only: the reply exactly as generated
    items += b.turn_items(items, 2, "more")
    items.append(comp.marker(3, [[0]]))  # a compaction at turn 3 hides turn 1's user message
    items += b.turn_items(items, 3, "third")
    text = tokenizer.decode(b.build(items, 3).token_ids, skip_special_tokens=False)
    assert "long thoughts" not in text and "<|im_start|>assistant\nHello!<|im_end|>\n" in text
    keep = ContextBuilder(tokenizer, "", None, ContextBudget(max_model_len=4096), keep_reasoning=True)
    assert "long thoughts" in tokenizer.decode(keep.build(items, 3).token_ids, skip_special_tokens=False)
    assert to_message(item, keep_reasoning=False).get("reasoning_content") is None


def test_unstable_template_is_detected_and_prompts_stay_prefix_extending(tokenizer, caplog) -> None:
    import copy

    tok = copy.deepcopy(tokenizer)
    old = "{%- if message.reasoning_content is string %}"
    assert old in tok.chat_template
    # shows reasoning on the newest message only, as Qwen3's official template strips older reasoning
    tok.chat_template = tok.chat_template.replace(old, "{%- if message.reasoning_content is string and loop.last %}")
    b = ContextBuilder(tok, "sys", None, ContextBudget(max_model_len=4096))
    items = b.turn_items([], 1, "q1")
    first = b.build(items, 1).token_ids
    reply = tok("<think>\nhm\n</think>\n\na1<|im_end|>", add_special_tokens=False)["input_ids"]
    item = b.assistant_item(1, reply, content="a1", reasoning_content="hm")
    items.append(item)
    with caplog.at_level("WARNING"):
        items += b.turn_items(items, 2, "q2")
    second = b.build(items, 2).token_ids
    assert not b.renderer.prefix_stable and "not prefix-stable" in caplog.text
    assert second[: len(first) + len(reply) + 1] == first + reply + b.renderer.trailer()
    assert tok.decode(items[-1]["token_ids"], skip_special_tokens=False) == "<|im_start|>user\nq2<|im_end|>\n"


def test_top_hit_larger_than_the_retrieval_cap_still_yields_text(tokenizer) -> None:
    """A first hit over the cap is cut at a sentence boundary, never left out; what was cut is recorded."""
    b = ContextBuilder(tokenizer, "sys", budget=ContextBudget(max_model_len=2048, max_retrieval_tokens=80))
    long = " ".join(f"Sentence number {i} explains one more detail of the API." for i in range(60))
    fit = b.fit_retrieval([_Hit(long, "big.rst", "Big"), _Hit("Short entry.", "small.rst", "Small")])
    (shown,) = [h for h in fit.shown if h.document == "big.rst"]
    assert shown.text.endswith("API. [...]") and long.startswith(shown.text[:-len(" [...]")])
    assert fit.truncated == ["big.rst - Big"] and fit.cut_tokens > 0
    assert b.count_message_tokens(format_retrieval(fit.shown)) <= 80
    (item, _user) = b.turn_items([], 1, "q", fit)
    assert item["kind"] == "retrieval" and item["cut"]["truncated"] == ["big.rst - Big"]
    assert "Sentence number 0" in item["content"]


def test_hits_after_one_that_does_not_fit_are_still_taken_when_they_fit(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "sys", budget=ContextBudget(max_model_len=2048, max_retrieval_tokens=90))
    hits = [_Hit("First short hit.", "a.md", "A"), _Hit("word " * 300, "b.md", "B"), _Hit("Third hit.", "c.md", "C")]
    fit = b.fit_retrieval(hits)
    assert [h.document for h in fit.shown] == ["a.md", "c.md"] and fit.dropped == ["b.md - B"]
    assert b.fit_retrieval(hits[:1]).record() is None


def test_reply_ending_on_another_engine_eos_is_stored_closed_by_the_templates_end_of_turn(tokenizer) -> None:
    """A model may stop on any of the engine's eos ids (``LLMEngine.eos_token_ids``); the stored
    turn ends as the template spells it, so the next prompt equals the template's rendering."""
    b = ContextBuilder(tokenizer, "sys", None, ContextBudget(max_model_len=2048))
    items = b.turn_items([], 1, "hi")
    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos_ids = frozenset({b.renderer.end_of_turn_id, end_of_text})
    reply = tokenizer("Hello!", add_special_tokens=False)["input_ids"]
    item = b.assistant_item(1, reply + [end_of_text], eos_token_ids=eos_ids, content="Hello!")
    assert item["token_ids"] == b.gen_prompt_ids + reply + [b.renderer.end_of_turn_id] + b.renderer.trailer()
    items.append(item)
    items += b.turn_items(items, 2, "again")
    ref = b.renderer.encode(b.renderer.render(b.messages(items), add_generation_prompt=True))
    assert b.build(items, 2).token_ids == ref
