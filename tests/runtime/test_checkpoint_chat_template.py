"""The checkpoints' chat template (Qwen3 / Hermes convention): exact rendering and turn-to-turn stability."""

from __future__ import annotations

import pytest

from loom.runtime.checkpoint import build_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search docs",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are Loom."}
CALL_TURN = {
    "role": "assistant",
    "reasoning_content": "I should search.",
    "content": "Searching.",
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": {"q": "X", "a": 1}}},
        {"id": "c2", "type": "function", "function": {"name": "search", "arguments": '{"q": "Y"}'}},
    ],
}
# What the model must emit after "<|im_start|>assistant\n" for CALL_TURN (then <|im_end|>).
CALL_REPLY = (
    "<think>\nI should search.\n</think>\n\nSearching.\n"
    '<tool_call>\n{"name": "search", "arguments": {"a": 1, "q": "X"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "search", "arguments": {"q": "Y"}}\n</tool_call>'
)
CONVERSATION = [
    SYSTEM,
    {"role": "user", "content": "Find X"},
    CALL_TURN,
    {"role": "tool", "tool_call_id": "c1", "content": "result 1"},
    {"role": "tool", "tool_call_id": "c2", "content": "result 2"},
    {"role": "assistant", "reasoning_content": "Got both.", "content": "Done."},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    {"role": "assistant", "content": "You're welcome."},
]
TOOLS_SYSTEM = (
    "<|im_start|>system\nYou are Loom.\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"function": {"description": "Search docs", "name": "search", "parameters": {"properties": '
    '{"q": {"type": "string"}}, "required": ["q"], "type": "object"}}, "type": "function"}\n</tools>\n\n'
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call><|im_end|>\n"
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def render(tok, messages, tools=None, gen=False, **kw) -> str:
    return tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen, **kw)


def test_renders_every_role_exactly(tok):
    assert render(tok, CONVERSATION[:7], TOOLS, gen=True) == (
        TOOLS_SYSTEM
        + "<|im_start|>user\nFind X<|im_end|>\n"
        + "<|im_start|>assistant\n" + CALL_REPLY + "<|im_end|>\n"
        + "<|im_start|>user\n<tool_response>\nresult 1\n</tool_response>\n"
        + "<tool_response>\nresult 2\n</tool_response><|im_end|>\n"
        + "<|im_start|>assistant\n<think>\nGot both.\n</think>\n\nDone.<|im_end|>\n"
        + "<|im_start|>user\nthanks<|im_end|>\n"
        + "<|im_start|>assistant\n"
    )


def test_without_tools_system_turn_is_plain(tok):
    msgs = [SYSTEM, {"role": "user", "content": "hi"}]
    assert render(tok, msgs) == "<|im_start|>system\nYou are Loom.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert render(tok, msgs[1:], TOOLS).startswith("<|im_start|>system\n# Tools\n\n")


def test_earlier_reasoning_is_kept(tok):
    text = render(tok, CONVERSATION, TOOLS)
    assert "<think>\nI should search.\n</think>" in text and "<think>\nGot both.\n</think>" in text


def test_tool_call_without_content_and_openai_flat_form(tok):
    msg = {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {"b": [1, "é"], "a": None}}]}
    assert render(tok, [msg]) == (
        '<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {"a": null, "b": [1, "é"]}}\n'
        "</tool_call><|im_end|>\n"
    )


def test_generation_prompt_can_disable_thinking(tok):
    msgs = [{"role": "user", "content": "hi"}]
    assert render(tok, msgs, gen=True).endswith("<|im_start|>assistant\n")
    assert render(tok, msgs, gen=True, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_unknown_role_is_an_error(tok):
    with pytest.raises(Exception, match="Unknown message role"):
        render(tok, [{"role": "robot", "content": "x"}])


def test_next_turn_prompt_extends_previous_prompt_plus_reply(tok):
    """Prompt(N+1) == Prompt(N) + reply + "<|im_end|>" + "\\n" + new turns, as text and as token ids.

    The reply is exactly what the model emits after "<|im_start|>assistant\\n":
    optional "<think>\\n{reasoning}\\n</think>\\n\\n", the content, then per tool call
    ("\\n" before it unless it comes first with no content)
    '<tool_call>\\n{"name": N, "arguments": ARGS}\\n</tool_call>' with ARGS canonical
    JSON (sorted keys, ", " and ": " separators), then <|im_end|>.
    """
    replies = {2: CALL_REPLY, 5: "<think>\nGot both.\n</think>\n\nDone.", 7: "You're welcome."}
    for i, reply in replies.items():
        prompt = render(tok, CONVERSATION[:i], TOOLS, gen=True)
        later = render(tok, CONVERSATION[: i + 2], TOOLS, gen=True)
        assert later.startswith(prompt + reply + "<|im_end|>\n")
        prompt_ids = tok.encode(prompt)
        assert tok.encode(later)[: len(prompt_ids)] == prompt_ids
    # The whole history as one render equals the last turn's render plus its reply.
    last = render(tok, CONVERSATION[:7], TOOLS, gen=True)
    assert render(tok, CONVERSATION, TOOLS) == last + replies[7] + "<|im_end|>\n"


def test_tool_schemas_render_canonically_regardless_of_key_order(tok):
    shuffled = [{"function": dict(reversed(list(TOOLS[0]["function"].items()))), "type": "function"}]
    msgs = [{"role": "user", "content": "hi"}]
    assert render(tok, msgs, shuffled) == render(tok, msgs, TOOLS)
