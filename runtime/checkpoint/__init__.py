r"""Random-weight Hugging Face checkpoints for tests and benchmarks (no downloads).

``init_checkpoint(out_dir, arch, preset)`` writes a folder that
``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` load;
``ensure_checkpoint(arch, preset)`` caches one per argument set. All share one
byte-level BPE tokenizer and the Qwen3 / Hermes chat template.

Chat template stability: the prompt rendered for turn N+1 starts with the
prompt for turn N + the reply + ``<|im_end|>`` (the template then adds ``\n``)
when the reply the model generated after ``<|im_start|>assistant\n`` is exactly
what the template renders for the stored assistant message:
``<think>\n{reasoning_content}\n</think>\n\n`` (only if ``reasoning_content`` is
set), then ``content``, then per tool call ``\n`` (omitted before the first call
when content is empty) + ``<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>``
where dict ARGS render as ``json.dumps(args, ensure_ascii=False, sort_keys=True)``
and string ARGS verbatim; the model ends with ``<|im_end|>``.
"""

from loom.runtime.checkpoint.init import (
    count_parameters,
    default_cache_dir,
    ensure_checkpoint,
    init_checkpoint,
    model_config,
)
from loom.runtime.checkpoint.presets import ARCHES, PRESETS
from loom.runtime.checkpoint.tokenizer import ADDED_TOKENS, build_tokenizer, chat_template

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
