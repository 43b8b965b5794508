"""Split a loaded Llama-family model across the tensor-parallel group, in place.

Each rank loads the whole checkpoint (``loom.runtime.models.loader.load_model``, identical on every
rank, dummy weights included since they are seeded), then ``shard_model`` swaps the four
projections of every decoder layer for their parallel forms, as vLLM's Llama does:

* ``qkv_proj`` -> ``ColumnParallelLinear(output_sizes=[q, kv, kv])``: rank ``r`` keeps query heads
  ``[r * Hq / tp, (r + 1) * Hq / tp)`` and KV heads ``[r * Hkv / tp, ...)``, which are exactly the
  KV heads its query heads read under GQA;
* ``o_proj`` -> ``RowParallelLinear``: partial outputs all-reduced (one all-reduce per attention);
* ``gate_up_proj`` -> ``ColumnParallelLinear(output_sizes=[I, I])``, ``down_proj`` ->
  ``RowParallelLinear`` (one all-reduce per MLP).

Embeddings, norms and ``lm_head`` stay whole on every rank, so the final hidden states and the
logits are identical everywhere and rank 0 alone samples.  The KV cache of a rank holds its
``Hkv / tp`` heads for every block, so one block table and one slot mapping serve all ranks.

Loading the whole model before slicing costs ``tp`` times the weights' bytes transiently (vLLM
loads each rank's slice directly); for the sizes Loom runs on CPU this is the simple, exact choice.
"""

from __future__ import annotations

import torch
from torch import nn

from loom.runtime.distributed.layers import ColumnParallelLinear, RowParallelLinear
from loom.runtime.distributed.parallel_state import tensor_parallel_world_size
from loom.runtime.models.llama import LlamaForCausalLM


def check_tensor_parallel_shape(hf_config: object, tp: int) -> None:
    """Raise when the model cannot be split ``tp`` ways (vLLM refuses the same shapes).

    Raises:
        ValueError: query heads, KV heads or the MLP's intermediate size not divisible by ``tp``.
    """
    heads = hf_config.num_attention_heads  # type: ignore[attr-defined]
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
    inter = hf_config.intermediate_size  # type: ignore[attr-defined]
    for name, size in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads),
                       ("intermediate_size", inter)):
        if size % tp:
            raise ValueError(f"tensor_parallel_size: the model's {name} ({size}) is not divisible by {tp}")


def _column(module: nn.Module, output_sizes: list[int]) -> ColumnParallelLinear:
    old = _plain_linear(module)
    new = ColumnParallelLinear(old.in_features, old.out_features, old.bias is not None, output_sizes)
    new.load_full_weight(old.weight.data.float().cpu(), None if old.bias is None else old.bias.data.float().cpu())
    return new.to(device=old.weight.device, dtype=old.weight.dtype)


def _row(module: nn.Module) -> RowParallelLinear:
    old = _plain_linear(module)
    new = RowParallelLinear(old.in_features, old.out_features, old.bias is not None)
    new.load_full_weight(old.weight.data.float().cpu(), None if old.bias is None else old.bias.data.float().cpu())
    return new.to(device=old.weight.device, dtype=old.weight.dtype)


def _plain_linear(module: nn.Module) -> nn.Linear:
    if not isinstance(module, nn.Linear):
        raise TypeError(f"shard_model: expected an nn.Linear, got {type(module).__name__} (sharded twice?)")
    return module


@torch.no_grad()
def shard_model(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """Keep this rank's slice of every layer's projections (a no-op at tp = 1).

    Call after joining the group (``init_tensor_parallel``) and before building the KV cache
    (``ModelRunner`` sizes it from the attention layers' local ``num_kv_heads``).

    Raises:
        ValueError: the model's heads or intermediate size not divisible by the group's size.
    """
    tp = tensor_parallel_world_size()
    if tp == 1:
        return model
    check_tensor_parallel_shape(model.config, tp)
    for layer in model.model.decoder_layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.qkv_proj = _column(attn.qkv_proj, [attn.q_size, attn.kv_size, attn.kv_size])
        attn.o_proj = _row(attn.o_proj)
        attn.num_heads //= tp
        attn.num_kv_heads //= tp
        attn.q_size //= tp
        attn.kv_size //= tp
        attn.attn.num_heads, attn.attn.num_kv_heads = attn.num_heads, attn.num_kv_heads
        mlp.gate_up_proj = _column(mlp.gate_up_proj, [mlp.intermediate_size, mlp.intermediate_size])
        mlp.down_proj = _row(mlp.down_proj)
        mlp.intermediate_size //= tp
    return model
