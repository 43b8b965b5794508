"""Model shapes for random-weight checkpoints: architecture x size preset.

Each architecture maps to transformers' own config class, so the checkpoint is
an ordinary Hugging Face folder and ``transformers`` is the reference
implementation the engine is compared against. Arch-specific features:

- ``llama``: plain GQA decoder (Llama 2/3).
- ``qwen2``: bias on the q/k/v projections (hard-wired in ``Qwen2Attention``).
- ``qwen3``: per-head RMSNorm on queries and keys (``q_norm`` / ``k_norm``).
- ``mistral``: sliding-window attention (``sliding_window`` 2048, below the
  4096 positions; override it with e.g. 32 to exercise the window in tests).

Presets: ``tiny`` (hidden 64, 2 layers: milliseconds per step, for tests),
``small`` (hidden 640, 10 layers: about 60M parameters, for CPU benchmarks) and
``0.6b`` (Qwen3-0.6B's shape with the shared 4096-id vocabulary, for GPUs).
"""

from __future__ import annotations

from typing import Any

from loom.json_types import JSONObject

ARCHES: tuple[str, ...] = ("llama", "qwen2", "qwen3", "mistral")

PRESETS: dict[str, JSONObject] = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        # Larger than the usual 0.02 so that a random model's next-token
        # distribution is peaked enough to make greedy ties vanishingly rare and
        # sampling distributions visibly non-uniform.
        initializer_range=0.1,
    ),
    "small": dict(
        hidden_size=640,
        num_hidden_layers=10,
        num_attention_heads=10,
        num_key_value_heads=5,
        head_dim=64,
        intermediate_size=2304,
        max_position_embeddings=4096,
        rope_theta=1000000.0,
        initializer_range=0.02,
    ),
    # Qwen3-0.6B's body (28 layers, hidden 1024, GQA 16/8, head_dim 128) with the
    # shared 4096-id vocabulary: ~0.44B parameters, for GPU benchmarks, usually
    # written with weights=False and loaded with load_format="dummy".
    "0.6b": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        initializer_range=0.02,
        tie_word_embeddings=True,
    ),
}

# Shared by every arch and preset.
COMMON: JSONObject = dict(
    hidden_act="silu",
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    attention_dropout=0.0,
    use_cache=True,
)

# Arch-specific defaults on top of the preset.
ARCH_DEFAULTS: dict[str, JSONObject] = {
    "llama": dict(attention_bias=False, mlp_bias=False),
    "qwen2": dict(use_sliding_window=False),
    "qwen3": dict(attention_bias=False, use_sliding_window=False),
    "mistral": dict(sliding_window=2048),
}


def config_class(arch: str) -> type:
    """The transformers ``PretrainedConfig`` subclass for ``arch``.

    Raises:
        ValueError: unknown ``arch`` (names the field and the allowed values).
    """
    import transformers

    names = {
        "llama": "LlamaConfig",
        "qwen2": "Qwen2Config",
        "qwen3": "Qwen3Config",
        "mistral": "MistralConfig",
    }
    if arch not in names:
        raise ValueError(f"arch must be one of {list(ARCHES)}, got {arch!r}")
    return getattr(transformers, names[arch])


def make_config(
    arch: str,
    preset: str,
    *,
    vocab_size: int,
    bos_token_id: int | None,
    eos_token_id: int,
    pad_token_id: int,
    **overrides: Any,
) -> Any:
    """Build the transformers config for ``arch`` x ``preset`` (float32 weights).

    ``overrides`` replace preset values (e.g. ``sliding_window=32``,
    ``num_hidden_layers=4``, ``tie_word_embeddings=True``).

    Raises:
        ValueError: unknown ``arch`` or ``preset``, or an override key the
            arch's config does not know (HF configs would silently keep it).
    """
    cls = config_class(arch)
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)}, got {preset!r}")
    known = set(cls().to_dict()) | {"rope_theta", "head_dim"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"config_overrides: {unknown} not known to {cls.__name__}")
    kwargs = {**COMMON, **PRESETS[preset], **ARCH_DEFAULTS[arch], **overrides}
    config = cls(
        vocab_size=vocab_size,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        **kwargs,
    )
    config.dtype = "float32"
    # Written by save_pretrained of a model; set here so a weights-free folder has it too.
    config.architectures = [cls.__name__.replace("Config", "ForCausalLM")]
    sw = getattr(config, "sliding_window", None)
    if arch == "mistral" and sw is not None and sw > config.max_position_embeddings:
        raise ValueError(
            f"sliding_window ({sw}) must be <= max_position_embeddings "
            f"({config.max_position_embeddings})"
        )
    return config
