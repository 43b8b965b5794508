"""Find a checkpoint, build the model for its config and fill its weights.

``resolve_model_path`` accepts a local folder or a Hugging Face hub id (fetched
with ``huggingface_hub.snapshot_download``, which honours ``HF_HUB_OFFLINE`` and
the local cache).  ``load_model`` reads the checkpoint's tensors with their HF
names (``loom.runtime.checkpoint.tensors``: ``*.safetensors``, or the GGUF a
converted folder names, dequantized block by block), mapping q/k/v and gate/up
onto the fused projections (``packed_modules_mapping``, as vLLM's weight
loaders do), or, with
``load_format="dummy"``, draws random weights from the config alone
(vLLM's dummy format) — normal(0, ``initializer_range``) matrices, zero biases,
unit norm weights.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from loom.json_types import JSONObject
from loom.runtime.models.llama import LlamaForCausalLM

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from loom.runtime.checkpoint.tensors import TensorRows

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


RANDOM_PREFIX = "random:"


def resolve_model_path(model: str) -> Path:
    """Local HF checkpoint folder for ``model``.

    ``model`` may be, in this order:

    - ``random:ARCH-PRESET`` (e.g. ``random:qwen3-small``): a cached random-weight
      checkpoint (``loom.runtime.checkpoint.ensure_checkpoint``), for shapes and benchmarks;
    - a registered name (``smollm2-135m-instruct``): downloaded, verified and
      converted on first use (``loom.runtime.checkpoint.registry``);
    - a ``.gguf`` file, or a folder holding exactly one: converted once, cached;
    - a HF checkpoint folder;
    - a Hugging Face hub id (``huggingface_hub.snapshot_download``, which honours
      ``HF_HUB_OFFLINE`` and the local cache).

    Raises:
        ModelLoadError: a registered model or GGUF file that cannot be prepared.
        NotFoundError: none of the above; a bare name close to a registered
            one (``smollm2-135m``) is not tried on the hub, the error suggests
            the registered name (``UnknownModelError``).
        ValueError: a malformed ``random:`` spec.
    """
    from loom.runtime.checkpoint.gguf import ensure_converted, find_gguf
    from loom.runtime.checkpoint.registry import (
        UnknownModelError,
        close_names,
        ensure_model,
        lookup,
        unknown_model_message,
    )
    from loom.runtime.errors import NotFoundError

    if model.startswith(RANDOM_PREFIX):
        return _random_checkpoint(model[len(RANDOM_PREFIX):])
    if lookup(model) is not None:
        return ensure_model(model)
    path = Path(model).expanduser()
    gguf = find_gguf(path)
    if gguf is not None:
        return ensure_converted(gguf)
    if path.is_dir():
        return path
    if "/" not in model and not path.exists() and close_names(model):  # a mistyped registered name
        raise UnknownModelError(f"model: {unknown_model_message(model)}")
    if model.startswith((".", "/", "~")) or path.suffix.lower() == ".gguf" or model.count("/") > 1:
        raise NotFoundError(f"model: {model!r} is not a folder, a .gguf file, a registered name "
                            "(loom model list) or a hub id")
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.txt"])
        )
    except Exception as exc:  # noqa: BLE001 - hub errors vary (offline, 404, auth)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NotFoundError(f"model: {model!r} is not a local folder and could not be fetched from the hub "
                            f"({reason}); registered models: loom model list") from exc


def _random_checkpoint(spec: str) -> Path:
    from loom.runtime.checkpoint import ARCHES, PRESETS, ensure_checkpoint

    arch, _, preset = spec.partition("-")
    if arch not in ARCHES or preset not in PRESETS:
        raise ValueError(f"model: 'random:{spec}' must be random:ARCH-PRESET with ARCH in {sorted(ARCHES)} "
                         f"and PRESET in {sorted(PRESETS)}")
    return ensure_checkpoint(arch, preset)


def load_hf_config(path: Path, overrides: JSONObject | None = None) -> PretrainedConfig:
    """The transformers config of the checkpoint at ``path``.

    Raises:
        ValueError: a ``model_type`` this engine does not implement.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path))
    for key, value in (overrides or {}).items():
        setattr(config, key, value)
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model: model_type {config.model_type!r} not supported (one of {SUPPORTED_MODEL_TYPES})")
    return config


def load_model(
    path: Path,
    hf_config: PretrainedConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    load_format: str = "auto",
    max_positions: int | None = None,
    seed: int = 0,
    quantization: str | None = None,
    group_size: int = 32,
) -> LlamaForCausalLM:
    """Build the model and fill its weights, in ``dtype`` on ``device``.

    With ``quantization`` (``"int8"`` or ``"int4"``) the linear layers, head and
    embedding are quantized on CPU as the checkpoint is read, with no float copy
    (``loom.runtime.quantization.stream``); the result is cached
    (``loom.runtime.quantization.cache``), so a later load reads
    the quantized tensors without building the float model.  On CUDA the
    quantized layers then move to the GPU kernels' layouts
    (``loom.runtime.quantization.cuda``).

    Raises:
        FileNotFoundError: no ``*.safetensors`` in ``path`` (and not dummy).
        ValueError: a tensor whose name or shape the model does not expect.
    """
    def build_float(on: torch.device) -> LlamaForCausalLM:
        with torch.device("meta"):  # no random init of weights the checkpoint (or the dummy init) fills
            model = LlamaForCausalLM(hf_config, max_positions)
        # to_empty(device="cpu") without its meta path (torch._refs.empty_like), which imports sympy: 0.65 s a process
        model = model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype))
        model.tie_weights()
        if load_format == "dummy":
            _init_dummy(model, hf_config, seed)
        else:
            _load_tensors(model, hf_config, path)
        return model.to(device=on, dtype=dtype)

    if quantization is None:
        model = build_float(device)
    else:  # quantized on CPU (the grid the quality figures were measured on), then in the device's layouts
        if load_format == "dummy":
            from loom.runtime.quantization import quantize_model

            model = quantize_model(build_float(torch.device("cpu")), quantization, group_size)
        else:
            from loom.runtime.quantization.cache import load_quantized

            model = load_quantized(path, hf_config, method=quantization, group_size=group_size, dtype=dtype,
                                   max_positions=max_positions)
        if device.type == "cuda":
            from loom.runtime.quantization import use_cuda_layouts

            use_cuda_layouts(model, device)
        else:
            from loom.runtime.quantization import use_cpu_kernel_layouts

            use_cpu_kernel_layouts(model)
    model.model.decoder_layers[0].self_attn.rope.move_to(device)  # tables stay float32
    if device.type == "cpu":
        from loom.runtime.host_memory import use_huge_pages

        use_huge_pages(model)  # a decode step streams every weight: 2 MiB pages, not 4 KiB ones
    model.eval()
    return model


def _load_tensors(model: LlamaForCausalLM, hf_config: PretrainedConfig, path: Path) -> None:
    """Fill ``model``'s parameters from the checkpoint at ``path`` (``checkpoint_tensors``: its safetensors,
    or the GGUF it names, dequantized block by block)."""
    from loom.runtime.checkpoint.tensors import checkpoint_tensors

    params = dict(model.named_parameters())
    tied = getattr(hf_config, "tie_word_embeddings", False)
    loaded: set[str] = set()
    for block in checkpoint_tensors(path, hf_config):
        if tied and block.name == "lm_head.weight":  # the head is the embedding (transformers ties after loading)
            continue
        loaded.add(_load_rows(model, params, block))
    missing = set(params) - loaded
    if missing:
        raise ValueError(f"model: checkpoint lacks tensors {sorted(missing)[:5]}")
    logger.info("loaded %d tensors from %s", len(loaded), path)


def _load_rows(model: LlamaForCausalLM, params: dict[str, torch.nn.Parameter], block: TensorRows) -> str:
    name, shard = model.hf_target(block.name)
    if name not in params:
        raise ValueError(f"model: unexpected tensor {block.name!r} in checkpoint")
    target = params[name].data if shard is None else params[name].data[shard]
    with torch.no_grad():
        block.rows_of(target).copy_(block.data)
    return name


def _init_dummy(model: LlamaForCausalLM, hf_config: PretrainedConfig, seed: int) -> None:
    std = float(getattr(hf_config, "initializer_range", 0.02))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, std, generator=gen)
