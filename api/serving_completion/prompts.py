"""Turn a ``/v1/completions`` request into prompts (token ids) and ``SamplingParams``.

``prompt`` takes OpenAI's four shapes: a string, a list of strings, a list of
token ids, a list of lists of token ids.  Text is tokenized with the served
model's tokenizer (``add_special_tokens`` as vLLM, default true); token ids
must be ids of that tokenizer.  Each prompt gets its own ``max_tokens``:

- ``max_tokens`` left out (OpenAI's default 16) is cut to what the context
  window leaves, so a long prompt still gets an answer;
- a ``max_tokens`` the client set that does not fit is a 400
  ``context_length_exceeded`` naming ``max_tokens`` (vLLM);
- ``null`` means the server's ``default_max_tokens``, cut to the window (as chat);
- ``0`` is allowed only with ``echo`` (the prompt and its logprobs, nothing
  generated; the engine runs one token that is not returned, as vLLM).

A prompt that alone fills the window is a 400 naming ``prompt`` (``prompt.<i>``
for one of several).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from loom.api.prompt_limits import check_text_chars
from loom.api.serving_chat.prompt import output_constraint, sampling_fields, token_bias
from loom.api.schemas.completions import MAX_CHOICES, CompletionRequest
from loom.json_types import JSONObject
from loom.orchestrator.protocols import Tokenizer, decode_text
from loom.runtime.errors import ContextLengthError, InvalidRequestError
from loom.runtime.sampling_params import SamplingParams


@dataclass
class CompletionPrompt:
    """One prompt of a request: its token ids, its text (as sent, or decoded from the ids), the
    request field naming it (``prompt`` or ``prompt.<i>``) and its ``SamplingParams``."""

    token_ids: list[int]
    text: str
    param: str
    sampling_params: SamplingParams | None = None

    def params(self) -> SamplingParams:
        """``sampling_params``, which ``prepare_completion`` sets on every prompt it returns.

        Raises:
            RuntimeError: called on a prompt that was not prepared.
        """
        if self.sampling_params is None:
            raise RuntimeError(f"{self.param}: no SamplingParams (not prepared)")
        return self.sampling_params


@dataclass
class PreparedCompletion:
    """Everything the route needs: prompts (each with its params), ``n``, and how to shape output."""

    prompts: list[CompletionPrompt]
    n: int
    echo: bool
    echo_only: bool  # max_tokens == 0: the prompt alone is returned
    logprobs: int | None
    skip_special_tokens: bool
    return_token_ids: bool
    constraint_field: str | None  # request field whose output constraint the engine compiles


def _items(prompt: Any) -> list[Any]:
    """The request's prompts, each a ``str`` or a ``list[int]``."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise InvalidRequestError("prompt must not be empty", param="prompt")
    if isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)


def read_prompts(body: CompletionRequest, tokenizer: Tokenizer, max_model_len: int | None = None
                 ) -> list[CompletionPrompt]:
    """Token ids and text of each prompt.

    Raises:
        InvalidRequestError: an empty prompt, or a token id outside the tokenizer's
            ``[0, len(tokenizer))`` (``param`` ``prompt`` / ``prompt.<i>``).
        ContextLengthError: a text prompt too long to fit ``max_model_len`` tokens whatever it says
            (:func:`loom.api.prompt_limits.check_text_chars`; refused before it is tokenized).
    """
    items = _items(body.prompt)
    vocab = len(tokenizer)
    out = []
    for i, item in enumerate(items):
        param = "prompt" if len(items) == 1 else f"prompt.{i}"
        if isinstance(item, str):
            check_text_chars(tokenizer, max_model_len, len(item), param)
            ids = list(tokenizer.encode(item, add_special_tokens=body.add_special_tokens))
            text = item
        else:
            bad = next((t for t in item if t >= vocab), None)
            if bad is not None:
                raise InvalidRequestError(f"token id {bad} is not in the model's vocabulary [0, {vocab})",
                                          param=param)
            ids = list(item)
            text = decode_text(tokenizer, ids, skip_special_tokens=body.skip_special_tokens)
        if not ids:
            raise InvalidRequestError("prompt must not be empty", param=param)
        out.append(CompletionPrompt(ids, text, param))
    return out


def _max_tokens(body: CompletionRequest, prompt: CompletionPrompt, default_max_tokens: int,
                max_model_len: int | None) -> int:
    """Output budget of one prompt (engine tokens: at least 1)."""
    n_prompt = len(prompt.token_ids)
    room = None if max_model_len is None else max_model_len - n_prompt
    if room is not None and room <= 0:
        raise ContextLengthError(f"This model's maximum context length is {max_model_len} tokens, but the "
                                 f"prompt uses {n_prompt} tokens.", param=prompt.param)
    if body.max_tokens == 0:
        if not body.echo:
            raise InvalidRequestError("max_tokens may be 0 only with echo", param="max_tokens")
        return 1
    if body.max_tokens is None:
        return max(1, min(default_max_tokens, room if room is not None else default_max_tokens))
    if "max_tokens" not in body.model_fields_set:  # OpenAI's default 16: cut to the window
        return body.max_tokens if room is None else min(body.max_tokens, room)
    if room is not None and body.max_tokens > room:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{n_prompt + body.max_tokens} tokens ({n_prompt} in the prompt, {body.max_tokens} in the "
            "completion).", param="max_tokens")
    return body.max_tokens


def _check_fields(body: CompletionRequest, n_prompts: int) -> int:
    """``n`` after the checks vLLM and OpenAI make on ``suffix``, ``best_of`` and the choice count."""
    n = body.n or 1
    if body.suffix:
        raise InvalidRequestError("suffix is not supported (no served model fills in the middle)",
                                  param="suffix")
    if body.best_of is not None and body.best_of != n:
        raise InvalidRequestError(f"best_of must equal n ({n}): Loom returns every sample it draws",
                                  param="best_of")
    if n_prompts * n > MAX_CHOICES:
        raise InvalidRequestError(f"prompts x n must be at most {MAX_CHOICES}, got {n_prompts} x {n}",
                                  param="n" if n > 1 else "prompt")
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError("stream_options requires stream to be true", param="stream_options")
    return n


def prepare(body: CompletionRequest, tokenizer: Tokenizer, default_max_tokens: int,
            max_model_len: int | None, defaults: Mapping[str, float | int] | None = None,
            cache_salt: str | None = None) -> PreparedCompletion:
    """Prompts with their ``SamplingParams`` for ``body``.

    ``defaults``: the model's sampling defaults for fields the request leaves unset
    (``loom.runtime.checkpoint.generation_config``; its ``max_tokens`` replaces
    ``default_max_tokens``); otherwise OpenAI's (temperature 1, top_p 1).
    ``cache_salt``: the engine's salt for the request (:mod:`loom.api.cache_scope`).

    Raises:
        InvalidRequestError: an invalid field or combination (``param`` names it).
        ContextLengthError: a prompt fills the window, or ``max_tokens`` does not fit.
    """
    prompts = read_prompts(body, tokenizer, max_model_len)
    n = _check_fields(body, len(prompts))
    view = SimpleNamespace(response_format=body.response_format, structured_outputs=body.structured_outputs,
                           guided_json=body.guided_json, guided_regex=body.guided_regex,
                           guided_choice=body.guided_choice, guided_grammar=body.guided_grammar,
                           tools=None, tool_choice=None)
    field, structured = output_constraint(view, False)  # type: ignore[arg-type]
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    defaults = defaults or {}
    default_max_tokens = int(defaults.get("max_tokens", default_max_tokens))
    base: JSONObject = {
        **sampling_fields(body, defaults),
        "stop": stop,
        "seed": body.seed,
        "skip_special_tokens": body.skip_special_tokens,
        "structured_output": structured,
        "logprobs": body.logprobs,
        "prompt_logprobs": body.logprobs if body.echo else None,
        "logit_bias": token_bias(body, len(tokenizer)),  # type: ignore[arg-type]
        "cache_salt": cache_salt,
    }
    echo_only = body.max_tokens == 0
    if echo_only:
        base["min_tokens"] = 0
    for p in prompts:
        p.sampling_params = SamplingParams(max_tokens=_max_tokens(body, p, default_max_tokens, max_model_len),
                                           **base)
    return PreparedCompletion(prompts=prompts, n=n, echo=body.echo, echo_only=echo_only,
                              logprobs=body.logprobs, skip_special_tokens=body.skip_special_tokens,
                              return_token_ids=bool(body.return_token_ids),
                              constraint_field=field)
