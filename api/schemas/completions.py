"""OpenAI legacy completions request and response models (``/v1/completions``).

Field names and shapes follow OpenAI's API reference ("Completions"); the
extensions are vLLM's ``CompletionRequest`` fields (``top_k``, ``min_p``,
``repetition_penalty``, ``min_tokens``, ``stop_token_ids``, ``ignore_eos``,
``include_stop_str_in_output``, ``skip_special_tokens``, ``add_special_tokens``,
``structured_outputs`` / ``guided_*``, ``stream_options.continuous_usage_stats``)
and a choice's ``stop_reason``.  Unknown fields are ignored and logged, or a 400
naming them on a ``--strict`` server (``loom.api.schemas.base``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from loom.api.schemas.base import RequestModel
from loom.api.schemas.chat import MAX_N, ResponseFormat, StreamOptions, StructuredOutputs, Usage, integral
from loom.json_types import JSONObject

MAX_LOGPROBS = 20  # vLLM's default max_logprobs (OpenAI's legacy API allows 5)
MAX_CHOICES = 256  # prompts x n per request: each one is an engine request

TokenId = Annotated[int, Field(ge=0)]
Prompt = str | list[str] | list[TokenId] | list[list[TokenId]]


class CompletionRequest(RequestModel):
    """Body of ``POST /v1/completions``.

    ``prompt`` is one text, several texts, one prompt as token ids, or several
    prompts as token ids; each prompt runs ``n`` times, and choice
    ``prompt_index * n + j`` is the ``j``-th sample of prompt ``prompt_index`` (vLLM).
    """

    model: str
    prompt: Prompt = Field(description="A string, a list of strings, a list of token ids or a list of "
                           "lists of token ids (the served model's tokenizer).")
    best_of: int | None = Field(default=None, ge=1, description="Accepted only when equal to `n`.")
    echo: bool = Field(default=False, description="Return the prompt before the completion (with its "
                       "logprobs when `logprobs` is set; the first prompt token's is null).")
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = Field(
        default=None, description="Token id (as a string) -> bias added to its logit, in [-100, 100].")
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS, description=(
        f"Log-probabilities of the sampled tokens and the `logprobs` most likely ones (0..{MAX_LOGPROBS}, "
        "as vLLM; OpenAI allows 5)."))
    max_tokens: int | None = Field(default=16, ge=0, description=(
        "Most tokens to generate (default 16, as OpenAI); 0 only with `echo` (the prompt's logprobs "
        "alone); null: the rest of the context window."))
    n: int | None = Field(default=None, ge=1, le=MAX_N, description=f"Samples per prompt; at most {MAX_N}.")
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1, description="int64.")
    cache_salt: str | None = Field(default=None, min_length=1, max_length=256, description=(
        "vLLM's cache_salt: only requests with the same salt (and, by default, the same API key) share "
        "cached prompt prefixes."))
    stop: Annotated[str, Field(min_length=1)] | list[Annotated[str, Field(min_length=1)]] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    suffix: str | None = Field(default=None, description="Not supported (a 400 unless empty).")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    user: str | None = None
    # vLLM extensions
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    min_tokens: int | None = Field(default=None, ge=0)
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool = True
    return_token_ids: bool | None = Field(default=None, description=(
        "Include each choice's `prompt_token_ids` and `token_ids` (vLLM); streamed: the prompt's in "
        "a choice's first chunk, each chunk's new ids in it."))
    add_special_tokens: bool = Field(default=True, description="Add the tokenizer's special tokens "
                                     "(e.g. BOS) to text prompts (vLLM).")
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: JSONObject | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = Field(default=None, min_length=1)
    guided_grammar: str | None = None

    _integral = field_validator("best_of", "logprobs", "max_tokens", "n", "seed", "top_k", "min_tokens",
                                mode="before")(integral)


class CompletionLogprobs(BaseModel):
    """``choices[i].logprobs``: one entry per token of ``text`` (prompt tokens first with ``echo``).

    ``text_offset`` is each token's character offset in the choice's ``text``
    (vLLM; OpenAI counts from the prompt's start, the same thing with ``echo``).
    """

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    """One choice (``index = prompt_index * n + j``)."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "abort"] | None = None
    stop_reason: int | str | None = Field(default=None, description="The stop string or token id that "
                                          "ended the choice (vLLM).")
    prompt_token_ids: list[int] | None = None  # vLLM's return_token_ids
    token_ids: list[int] | None = None  # return_token_ids: the generated ids (eos included)


class Completion(BaseModel):
    """A completion, or with ``stream`` one server-sent event of it (``usage`` then only on the
    ``include_usage`` chunk, whose ``choices`` is empty)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
