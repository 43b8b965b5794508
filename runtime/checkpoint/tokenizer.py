"""The one tokenizer every random-weight checkpoint shares.

A byte-level BPE (GPT-2 / Qwen2 style: Qwen2's pre-tokenizer regex, then the
byte-to-unicode map) trained offline with Hugging Face ``tokenizers`` on the
running Python's own documentation (``pydoc_data.topics``), so it needs no
download and is identical across runs (training is deterministic; the result is
kept in-process, training takes ~0.15 s). Because every arch and preset share it,
a ``tiny`` model can draft for a ``small`` one in speculative decoding.

Ids: the 256 byte tokens and the merges first, then the added tokens of
``ADDED_TOKENS`` at the end of the vocabulary (as in Qwen). ``<|endoftext|>``,
``<|im_start|>`` and ``<|im_end|>`` are special (dropped by
``skip_special_tokens``); the think/tool markers are not special, so decoded
text keeps them for the orchestrator to parse (as in Qwen3).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
# (content, special) in id order after the BPE vocabulary.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    (PAD_TOKEN, True),
    (BOS_TOKEN, True),
    (EOS_TOKEN, True),
    ("<think>", False),
    ("</think>", False),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
)
DEFAULT_VOCAB_SIZE = 4096
MIN_VOCAB_SIZE = 256 + len(ADDED_TOKENS)
MODEL_MAX_LENGTH = 4096

# Qwen2's pre-tokenizer split (digits one by one, words with a leading space).
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")


def chat_template() -> str:
    """The Jinja chat template (Qwen3 / Hermes convention), see ``chat_template.jinja``."""
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def training_corpus() -> list[str]:
    """The stdlib documentation topics (``pydoc_data.topics``), in sorted-key order."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def corpus_fingerprint() -> str:
    """Short sha256 of the training corpus (differs between Python versions)."""
    h = hashlib.sha256()
    for text in training_corpus():
        h.update(text.encode("utf-8"))
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=8)
def _train_bpe(vocab_size: int) -> str:
    """Train the BPE; returns the serialized ``tokenizer.json`` text."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
    from tokenizers import pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    tok.add_tokens(
        [AddedToken(t, special=s, normalized=False) for t, s in ADDED_TOKENS]
    )
    if tok.get_vocab_size() != vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} is more than the corpus supports "
            f"(got {tok.get_vocab_size()} tokens)"
        )
    return tok.to_str()


def build_tokenizer(vocab_size: int | None = None) -> Any:
    """The shared tokenizer as a ``transformers.PreTrainedTokenizerFast``.

    Args:
        vocab_size: total size including the 9 added tokens; default 4096.
            Any size from ``MIN_VOCAB_SIZE`` (265: bytes + added tokens, no
            merges) works, e.g. 300 for a tiny-vocabulary model.

    Returns:
        A fresh tokenizer object: ``len(tok) == vocab_size``, ``eos_token``
        ``<|im_end|>``, ``pad_token`` ``<|endoftext|>``, no BOS added, and the
        chat template set.

    Raises:
        ValueError: ``vocab_size`` below ``MIN_VOCAB_SIZE`` or above what the
            corpus can produce.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else int(vocab_size)
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be >= {MIN_VOCAB_SIZE}, got {vocab_size}")
    backend = Tokenizer.from_str(_train_bpe(vocab_size))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        chat_template=chat_template(),
        model_max_length=MODEL_MAX_LENGTH,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
