"""Random-weight Hugging Face checkpoints for tests and benchmarks (no downloads).

``init_checkpoint(out_dir, arch, preset)`` writes a folder that
``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` load;
``ensure_checkpoint(arch, preset)`` caches one per argument set. All share one
byte-level BPE tokenizer and the Qwen3 / Hermes chat template.
"""

from runtime.checkpoint.init import (
    count_parameters,
    default_cache_dir,
    ensure_checkpoint,
    init_checkpoint,
    model_config,
)
from runtime.checkpoint.presets import ARCHES, PRESETS
from runtime.checkpoint.tokenizer import ADDED_TOKENS, build_tokenizer, chat_template

__all__ = [
    "ADDED_TOKENS",
    "ARCHES",
    "PRESETS",
    "build_tokenizer",
    "chat_template",
    "count_parameters",
    "default_cache_dir",
    "ensure_checkpoint",
    "init_checkpoint",
    "model_config",
]
