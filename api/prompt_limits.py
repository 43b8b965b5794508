"""Text that cannot fit the model's window is refused from its length, before it is tokenized.

Tokenizing costs about a second per megabyte of text, so a request whose text
could never fit the window should not pay (or make the server pay) for that.
No token spells more characters than the longest entry of the tokenizer's
vocabulary (for byte-level BPE the entry's length is its byte count, an upper
bound on the characters it decodes to), so text longer than
``max_model_len x longest`` characters is more than ``max_model_len`` tokens
whatever it says: a ``ContextLengthError`` (400) naming the field, at once.
Text under the bound is tokenized and checked exactly, as before.
"""

from __future__ import annotations

import functools
from typing import Any

from loom.runtime.errors import ContextLengthError


@functools.lru_cache(maxsize=8)
def longest_token_chars(tokenizer: Any) -> int:
    """Characters of the longest vocabulary entry of ``tokenizer`` (computed once per tokenizer)."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1)


def check_text_chars(tokenizer: Any, max_model_len: int | None, chars: int, param: str) -> None:
    """Refuse ``chars`` characters of text that cannot fit ``max_model_len`` tokens.

    Raises:
        ContextLengthError: ``chars`` is over ``max_model_len x longest_token_chars(tokenizer)``.
    """
    if max_model_len is None:
        return
    bound = max_model_len * longest_token_chars(tokenizer)
    if chars > bound:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens, but {param} holds {chars} characters: "
            f"more than {bound} characters cannot fit whatever they say.", param=param)
