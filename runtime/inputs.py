"""Prompt types of ``LLM.generate`` (vLLM's ``vllm.inputs``, text-only).

A prompt is a string, a :class:`TextPrompt` or a :class:`TokensPrompt`; dicts, so a vLLM script's
``llm.generate([{"prompt_token_ids": ids}])`` runs unchanged.  :func:`prompt_ids` is the one place
that turns one into token ids, for ``LLM.generate`` and ``AsyncLLM.generate``; anything else
(``multi_modal_data`` included: Loom's models are text-only) is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from loom.runtime.errors import InvalidRequestError


class TextPrompt(TypedDict):
    """A text prompt, tokenized with the model's tokenizer (special tokens added as the tokenizer does)."""

    prompt: str


class TokensPrompt(TypedDict):
    """A prompt of token ids, used as given (no special tokens added)."""

    prompt_token_ids: list[int]


PromptType = str | TextPrompt | TokensPrompt
"""One prompt of ``LLM.generate``."""


_KEYS = frozenset({"prompt", "prompt_token_ids"})


def prompt_ids(prompt: Any, tokenizer: Any, where: str = "prompt") -> list[int]:
    """The token ids of ``prompt`` (a :data:`PromptType`): a string or ``TextPrompt`` encoded by ``tokenizer``
    (``encode(text) -> list[int]``), a ``TokensPrompt``'s ids as given; ``where`` names it in errors.

    Raises:
        InvalidRequestError: another type; a dict with other keys or without exactly one of ``prompt`` /
            ``prompt_token_ids``; a non-string ``prompt``; ids that are not a list of ints.
    """
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if not isinstance(prompt, Mapping) or len(_KEYS & set(prompt)) != 1:
        raise InvalidRequestError(f"{where}: must be a string, {{'prompt': str}} or {{'prompt_token_ids': [int, ...]}}",
                                  param="prompt")
    unknown = sorted(set(prompt) - _KEYS)
    if unknown:
        raise InvalidRequestError(f"{where}: {unknown[0]!r} is not supported (text-only models)", param="prompt")
    if "prompt" in prompt:
        if not isinstance(prompt["prompt"], str):
            raise InvalidRequestError(f"{where}: 'prompt' must be a string", param="prompt")
        return list(tokenizer.encode(prompt["prompt"]))
    ids = prompt["prompt_token_ids"]
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise InvalidRequestError(f"{where}: 'prompt_token_ids' must be a list of ints", param="prompt_token_ids")
    return list(ids)
