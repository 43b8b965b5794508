"""LoomChatModel: langchain-core BaseChatModel with tools both ways and usage metadata."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool as lc_tool

from loom.orchestrator.langchain import LoomChatModel

from tests.orchestrator.scripted_llm import ScriptedLLM


@lc_tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>'


def test_bind_tools_returns_tool_calls_langchain_accepts(tokenizer) -> None:
    llm = ScriptedLLM(tokenizer, ["<think>\nuse the tool\n</think>\n\n" + CALL, "It is 42."])
    model = LoomChatModel(llm=llm).bind_tools([multiply])
    msgs = [SystemMessage("Be exact."), HumanMessage("6 times 7?")]
    ai = model.invoke(msgs)
    assert isinstance(ai, AIMessage)
    assert [(c["name"], c["args"]) for c in ai.tool_calls] == [("multiply", {"a": 6, "b": 7})]
    assert ai.additional_kwargs["reasoning_content"] == "\nuse the tool\n"
    assert ai.usage_metadata["output_token_details"]["reasoning"] > 0
    result = multiply.invoke(ai.tool_calls[0])  # langchain-core runs the call as given
    assert isinstance(result, ToolMessage) and result.content == "42"
    final = model.invoke(msgs + [ai, result])
    assert final.content == "It is 42." and final.tool_calls == []
    # the tool call and its result went back through the template
    text = tokenizer.decode(llm.prompts[1], skip_special_tokens=False)
    assert "<tool_response>\n42\n</tool_response>" in text and '"name": "multiply"' in text
    assert final.usage_metadata["input_tokens"] == len(llm.prompts[1])
    assert final.usage_metadata["input_token_details"]["cache_read"] > 0


def test_stream_yields_chunks_and_last_chunk_carries_usage(tokenizer) -> None:
    model = LoomChatModel(llm=ScriptedLLM(tokenizer, ["Hello there, friend."]))
    chunks = list(model.stream([HumanMessage("hi")]))
    assert len(chunks) > 3
    assert "".join(c.content for c in chunks) == "Hello there, friend."
    assert chunks[-1].usage_metadata is not None and all(c.usage_metadata is None for c in chunks[:-1])
    assert chunks[-1].usage_metadata["output_tokens"] == len(tokenizer("Hello there, friend.")["input_ids"]) + 1


def test_streamed_tool_call_chunks_merge_into_tool_calls(tokenizer) -> None:
    model = LoomChatModel(llm=ScriptedLLM(tokenizer, [CALL])).bind_tools([multiply])
    merged = None
    for c in model.stream([HumanMessage("6*7")]):
        merged = c if merged is None else merged + c
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("multiply", {"a": 6, "b": 7})]


def test_token_counting_uses_tokenizer_and_template(tokenizer) -> None:
    model = LoomChatModel(llm=ScriptedLLM(tokenizer, []))
    assert model.get_num_tokens("hello world") == len(tokenizer("hello world")["input_ids"])
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert model.get_num_tokens_from_messages([HumanMessage("hi")]) == len(tokenizer(text)["input_ids"])


def test_prompt_with_tools_and_no_system_message_matches_the_template(tokenizer) -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    llm = ScriptedLLM(tokenizer, ["ok"])
    LoomChatModel(llm=llm).bind_tools([multiply]).invoke([HumanMessage("hi")])
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[convert_to_openai_tool(multiply)],
                                         tokenize=False, add_generation_prompt=True)
    assert llm.prompts[0] == tokenizer(text, add_special_tokens=False)["input_ids"]
