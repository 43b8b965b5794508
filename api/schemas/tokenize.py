"""vLLM's ``/tokenize`` and ``/detokenize`` request and response models.

``/tokenize`` takes vLLM's two request shapes in one model: a ``prompt``
(text, special tokens added by default) or chat ``messages`` (rendered by the
model's chat template exactly as ``/v1/chat/completions`` renders them, with
the generation prompt by default and no extra special tokens).  Unknown fields
are ignored and logged, or a 400 naming them on a ``--strict`` server.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from loom.api.schemas.base import RequestModel
from loom.api.schemas.chat import Message, ToolDef
from loom.json_types import JSONObject

TokenId = Annotated[int, Field(ge=0)]


class TokenizeRequest(RequestModel):
    """Body of ``POST /tokenize``: exactly one of ``prompt`` and ``messages``."""

    model: str | None = Field(default=None, description="The served model (any name /v1/models answers); "
                              "optional.")
    prompt: str | None = Field(default=None, description="Text to tokenize.")
    messages: list[Message] | None = Field(default=None, min_length=1, description=(
        "A chat to render with the model's chat template (as /v1/chat/completions does) and tokenize."))
    add_generation_prompt: bool = Field(default=True, description="With `messages`: end with the "
                                        "template's assistant header, as a chat completion's prompt does.")
    add_special_tokens: bool | None = Field(default=None, description=(
        "Add the tokenizer's special tokens (e.g. BOS); default true for `prompt`, false for `messages` "
        "(the template writes them), as vLLM."))
    return_token_strs: bool | None = Field(default=False, description="Also return each token's "
                                           "vocabulary string (`convert_ids_to_tokens`).")
    tools: list[ToolDef] | None = Field(default=None, description="With `messages`: tools rendered the "
                                        "model's way, as in a chat completion.")
    chat_template_kwargs: JSONObject | None = Field(default=None, description=(
        "With `messages`: extra chat-template variables, e.g. `{\"enable_thinking\": false}`."))


class TokenizeResponse(BaseModel):
    """Token ids of the prompt (``count`` of them) and the model's window (tokens)."""

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(RequestModel):
    """Body of ``POST /detokenize``."""

    model: str | None = Field(default=None, description="The served model; optional.")
    tokens: list[TokenId] = Field(description="Token ids of the served model's tokenizer.")


class DetokenizeResponse(BaseModel):
    """The text the ids spell (special tokens kept)."""

    prompt: str
