"""vLLM's ``POST /tokenize`` and ``POST /detokenize`` for the served model's tokenizer.

Chat ``messages`` go through the same renderer as ``/v1/chat/completions``
(``loom.api.serving_chat.prompt.template_messages`` and ``loom.orchestrator.template``), so the
``count`` of a chat equals the ``prompt_tokens`` a chat completion of it reports.
A prompt longer than the window is still tokenized (``count`` then exceeds
``max_model_len``: that is how a client measures it).
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request

from loom.api.auth import require_owner
from loom.api.serving_chat.prompt import template_kwargs, template_messages, tool_dicts
from loom.api.engine_io import engine_max_model_len
from loom.api.routes.chat import check_model
from loom.api.schemas.base import check_unknown_fields, strict_setting
from loom.api.schemas.chat import ChatCompletionRequest
from loom.api.schemas.errors import error_responses
from loom.api.schemas.tokenize import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from loom.orchestrator.protocols import Tokenizer
from loom.orchestrator.template import prompt_ids
from loom.runtime.errors import InvalidRequestError

router = APIRouter(tags=["vllm"], responses=error_responses(400, 401, 404))


@router.post("/tokenize", response_model=TokenizeResponse, summary="Tokenize a prompt or a chat")
async def tokenize(body: TokenizeRequest, request: Request,
                   owner: str = Depends(require_owner)) -> TokenizeResponse:
    """Token ids of ``prompt``, or of ``messages`` rendered as a chat completion's prompt (vLLM)."""
    services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    if body.model is not None:
        check_model(services, body.model)
    tokenizer = services.require_engine().tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequestError("send exactly one of prompt and messages",
                                  param="messages" if body.messages is not None else "prompt")
    if body.prompt is not None:  # off the event loop: a long text would stall every other request
        add = True if body.add_special_tokens is None else body.add_special_tokens
        prompt = body.prompt
        ids = await anyio.to_thread.run_sync(lambda: list(tokenizer.encode(prompt, add_special_tokens=add)))
    else:
        ids = await anyio.to_thread.run_sync(
            lambda: _chat_ids(body, tokenizer, services.tool_format, services.generated_ids, owner))
    return TokenizeResponse(count=len(ids), max_model_len=engine_max_model_len(services.require_engine()) or 0,
                            tokens=ids, token_strs=list(tokenizer.convert_ids_to_tokens(ids))
                            if body.return_token_strs else None)


def _chat_ids(body: TokenizeRequest, tokenizer: Tokenizer, fmt: Any, generated: Any, owner: str) -> list[int]:
    """The chat's prompt ids: exactly ``/v1/chat/completions``' for the default flags (the caller's
    remembered generated ids included, ``loom.orchestrator.reuse``)."""
    chat = ChatCompletionRequest.model_construct(model=body.model or "", messages=body.messages,
                                                 tools=body.tools, chat_template_kwargs=body.chat_template_kwargs)
    messages, tools = template_messages(chat), tool_dicts(chat)
    kwargs = template_kwargs(chat, tokenizer) or None

    def encode(text: str) -> list[int]:
        if body.add_special_tokens:
            return list(tokenizer.encode(text, add_special_tokens=True))
        if generated is not None:
            return generated.encode(owner, text).token_ids
        return list(tokenizer.encode(text, add_special_tokens=False))

    return prompt_ids(tokenizer, fmt, messages, tools, template_kwargs=kwargs, encode=encode,
                      add_generation_prompt=body.add_generation_prompt)


@router.post("/detokenize", response_model=DetokenizeResponse, summary="Detokenize token ids")
async def detokenize(body: DetokenizeRequest, request: Request,
                     owner: str = Depends(require_owner)) -> DetokenizeResponse:
    """The text token ids spell (vLLM); an id outside the tokenizer's vocabulary is a 400 naming it."""
    services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    if body.model is not None:
        check_model(services, body.model)
    tokenizer = services.require_engine().tokenizer
    vocab = len(tokenizer)
    for i, token in enumerate(body.tokens):
        if token >= vocab:
            raise InvalidRequestError(f"token id {token} is not in the model's vocabulary [0, {vocab})",
                                      param=f"tokens.{i}")
    return DetokenizeResponse(prompt=tokenizer.decode(body.tokens, skip_special_tokens=False))
