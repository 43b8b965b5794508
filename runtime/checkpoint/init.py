"""Write and cache random-weight Hugging Face checkpoints (vLLM's ``load_format="dummy"`` idea).

``init_checkpoint`` builds the model with transformers' own classes under
``torch.manual_seed(seed)`` and saves it with ``save_pretrained`` (float32
safetensors), plus the shared tokenizer (``tokenizer.json``,
``tokenizer_config.json`` with ``chat_template``, ``chat_template.jinja``) and
``generation_config.json``. The same arguments always give the same files.

``ensure_checkpoint`` creates a checkpoint once under a cache directory
(written to a temporary sibling folder, then renamed, so concurrent test runs
never see a half-written folder) and returns the cached path afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

from loom.runtime.checkpoint.cache import build_atomically, loom_cache_root
from loom.runtime.checkpoint.presets import make_config
from loom.runtime.checkpoint.tokenizer import (
    ADDED_TOKENS,
    DEFAULT_VOCAB_SIZE,
    EOS_TOKEN,
    MIN_VOCAB_SIZE,
    PAD_TOKEN,
    build_tokenizer,
    chat_template,
)

logger = logging.getLogger(__name__)

# Bump when the files written for the same arguments change, so caches refresh.
CHECKPOINT_FORMAT_VERSION = 2


def model_config(
    arch: str = "qwen3", preset: str = "tiny", vocab_size: int | None = None, **overrides: Any
) -> Any:
    """The transformers config ``init_checkpoint`` would write (for ``load_format="dummy"``).

    Special-token ids follow the shared tokenizer of ``vocab_size`` (default
    4096). Raises ``ValueError`` as ``init_checkpoint``.
    """
    vocab = DEFAULT_VOCAB_SIZE if vocab_size is None else int(vocab_size)
    if vocab < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be >= {MIN_VOCAB_SIZE}, got {vocab}")
    base = vocab - len(ADDED_TOKENS)  # added tokens sit at the end, in order
    ids = {tok: base + i for i, (tok, _) in enumerate(ADDED_TOKENS)}
    return make_config(
        arch,
        preset,
        vocab_size=vocab,
        bos_token_id=ids[PAD_TOKEN],  # as Qwen2/3 configs do; no BOS is ever added
        eos_token_id=ids[EOS_TOKEN],
        pad_token_id=ids[PAD_TOKEN],
        **overrides,
    )


def count_parameters(
    arch: str = "qwen3",
    preset: str = "tiny",
    vocab_size: int | None = None,
    **config_overrides: Any,
) -> int:
    """Number of parameters of ``arch`` x ``preset``, built on the meta device (no memory).

    Raises:
        ValueError: as ``init_checkpoint``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = model_config(arch, preset, vocab_size, **config_overrides)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _randomize_biases_and_norms(model: Any, std: float) -> None:
    """Perturb what transformers initializes to constants (biases 0, norm weights 1).

    Otherwise an engine that forgot the qkv bias or a norm's weight would still
    match the reference on these checkpoints.
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, std)
            elif "norm" in name and param.dim() == 1:
                param.add_(torch.randn_like(param), alpha=0.1)


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _write_tokenizer(tokenizer: Any, out: Path) -> None:
    tokenizer.save_pretrained(out)
    # transformers 5 writes the template to chat_template.jinja only; also keep
    # it in tokenizer_config.json (the contract, and what vLLM/older
    # transformers read), and name a class every transformers version knows.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = chat_template()
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def init_checkpoint(
    out_dir: str | os.PathLike,
    arch: str = "qwen3",
    preset: str = "tiny",
    seed: int = 0,
    vocab_size: int | None = None,
    weights: bool = True,
    **config_overrides: Any,
) -> Path:
    """Write a random-weight Hugging Face checkpoint folder.

    Args:
        out_dir: folder to write (created; existing files are overwritten).
        arch: ``llama`` | ``qwen2`` | ``qwen3`` | ``mistral``.
        preset: ``tiny`` (hidden 64, 2 layers) | ``small`` (~60M parameters).
        seed: ``torch.manual_seed`` for the weights: normal with std
            ``initializer_range`` (biases too); RMSNorm weights 1 + N(0, 0.1^2).
        vocab_size: tokenizer and model vocabulary (default 4096, >= 265).
        weights: ``False`` writes everything but ``model.safetensors`` (for an
            engine's ``load_format="dummy"`` at sizes too big to save).
        config_overrides: transformers config fields, e.g. ``sliding_window=32``.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``; weights are float32 safetensors.

    Raises:
        ValueError: unknown arch, preset or config field, or bad vocab_size.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    config = model_config(arch, preset, vocab_size, **config_overrides)
    tokenizer = build_tokenizer(config.vocab_size)
    assert len(tokenizer) == config.vocab_size
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    _write_tokenizer(tokenizer, out)
    if not weights:
        config.save_pretrained(out)
        generation_config.save_pretrained(out)
        logger.info("wrote %s %s config and tokenizer (no weights) to %s", arch, preset, out)
        return out
    # fork_rng keeps the caller's global RNG state untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _randomize_biases_and_norms(model, config.initializer_range)
    model.generation_config = generation_config
    with _quiet_progress_bars():
        model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    logger.info("wrote %s %s checkpoint (%d parameters, seed %d) to %s", arch, preset, n, seed, out)
    return out


def default_cache_dir() -> Path:
    """``$LOOM_CACHE/checkpoints``, else ``~/.cache/loom/checkpoints``."""
    return loom_cache_root() / "checkpoints"


def _cache_name(
    arch: str, preset: str, seed: int, vocab_size: int | None, weights: bool, overrides: dict
) -> str:
    name = f"v{CHECKPOINT_FORMAT_VERSION}-{arch}-{preset}-s{seed}"
    if not weights:
        name += "-noweights"
    if vocab_size is not None:
        name += f"-vocab{int(vocab_size)}"
    if overrides:
        blob = json.dumps(overrides, sort_keys=True, default=str)
        name += "-" + hashlib.sha256(blob.encode()).hexdigest()[:10]
    return name


def ensure_checkpoint(
    arch: str = "qwen3",
    preset: str = "tiny",
    cache_dir: str | os.PathLike | None = None,
    seed: int = 0,
    vocab_size: int | None = None,
    weights: bool = True,
    **config_overrides: Any,
) -> Path:
    """Create the checkpoint once under ``cache_dir`` and return its path.

    Same arguments as ``init_checkpoint``; ``cache_dir`` defaults to
    ``default_cache_dir()``. The folder name encodes every argument (and the
    format version), so different overrides never collide. Creation is atomic:
    a temporary folder in ``cache_dir`` is renamed into place; when another
    process wins the race its folder is used.

    Raises:
        ValueError: as ``init_checkpoint``.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / _cache_name(arch, preset, seed, vocab_size, weights, config_overrides)
    return build_atomically(final, lambda tmp: init_checkpoint(
        tmp, arch, preset, seed=seed, vocab_size=vocab_size, weights=weights, **config_overrides))
