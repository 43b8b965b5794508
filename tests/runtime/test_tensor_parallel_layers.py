"""Column- and row-parallel linear layers in 2 real processes over gloo equal one ``nn.Linear`` each.

An MLP (gate/up fused column-parallel, down row-parallel) and an attention projection pair (fused
QKV column-parallel, output row-parallel, heads split across ranks) as a Llama layer uses them.
"""

from __future__ import annotations

import torch
import torch.multiprocessing as mp
from torch import nn

from tests.api.server import free_port

H, I, HQ, HKV, D, T = 64, 96, 8, 2, 8, 5  # hidden, intermediate, query / KV heads, head_dim, tokens


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, kv = HQ * D, HKV * D
    shapes = {"gate_up": (2 * I, H), "down": (H, I), "qkv": (q + 2 * kv, H), "qkv_b": (q + 2 * kv,),
              "o": (H, q), "o_b": (H,), "x": (T, H)}
    return {k: torch.randn(*s, generator=g) for k, s in shapes.items()}


def _reference(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    x = w["x"]
    gate, up = nn.functional.linear(x, w["gate_up"]).chunk(2, dim=-1)
    mlp = nn.functional.linear(nn.functional.silu(gate) * up, w["down"])
    qkv = nn.functional.linear(x, w["qkv"], w["qkv_b"])
    attn_out = nn.functional.linear(qkv[:, :HQ * D], w["o"], w["o_b"])  # o_proj of the query part
    return {"mlp": mlp, "attn": attn_out}


def _rank(rank: int, world: int, url: str, out: str) -> None:
    from loom.runtime.distributed import (
        ColumnParallelLinear,
        RowParallelLinear,
        destroy_tensor_parallel,
        init_tensor_parallel,
    )

    torch.set_num_threads(1)
    init_tensor_parallel(rank, world, url, backend="gloo")
    try:
        w = _weights()
        gate_up = ColumnParallelLinear(H, 2 * I, bias=False, output_sizes=[I, I])
        down = RowParallelLinear(I, H, bias=False)
        gate_up.load_full_weight(w["gate_up"])
        down.load_full_weight(w["down"])
        gate, up = gate_up(w["x"]).chunk(2, dim=-1)  # this rank's slice of each part
        mlp = down(nn.functional.silu(gate) * up)
        q, kv = HQ * D, HKV * D
        qkv = ColumnParallelLinear(H, q + 2 * kv, output_sizes=[q, kv, kv])
        o = RowParallelLinear(q, H)
        qkv.load_full_weight(w["qkv"], w["qkv_b"])
        o.load_full_weight(w["o"], w["o_b"])
        local_q = qkv(w["x"])[:, :q // world]  # this rank's query heads
        attn = o(local_q)
        if rank == 0:
            torch.save({"mlp": mlp, "attn": attn, "qkv_rows": qkv.weight.shape[0]}, out)
    finally:
        destroy_tensor_parallel()


def test_two_gloo_ranks_compute_what_one_process_computes(tmp_path) -> None:
    out = str(tmp_path / "rank0.pt")
    mp.start_processes(_rank, args=(2, f"tcp://127.0.0.1:{free_port()}", out), nprocs=2, join=True,
                       start_method="spawn")
    got, want = torch.load(out), _reference(_weights())
    assert got["qkv_rows"] == (HQ * D + 2 * HKV * D) // 2  # each rank holds half of q, of k and of v
    torch.testing.assert_close(got["mlp"], want["mlp"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["attn"], want["attn"], rtol=1e-5, atol=1e-5)


def test_a_split_that_does_not_divide_is_refused_naming_the_size(monkeypatch) -> None:
    import pytest

    from loom.runtime.distributed import layers

    monkeypatch.setattr(layers, "tensor_parallel_world_size", lambda: 3)
    with pytest.raises(ValueError, match="in_features: 64 is not divisible by the tensor-parallel size 3"):
        layers.RowParallelLinear(64, 8)
    with pytest.raises(ValueError, match="output_sizes"):
        layers.ColumnParallelLinear(8, 64, output_sizes=[32, 32])


def test_without_a_group_the_layers_are_plain_linears() -> None:
    from loom.runtime.distributed import ColumnParallelLinear, RowParallelLinear

    w = _weights()
    col, row = ColumnParallelLinear(H, 2 * I, bias=False, output_sizes=[I, I]), RowParallelLinear(I, H, bias=False)
    col.load_full_weight(w["gate_up"])
    row.load_full_weight(w["down"])
    torch.testing.assert_close(col(w["x"]), nn.functional.linear(w["x"], w["gate_up"]))
    torch.testing.assert_close(row(col(w["x"])[:, :I]), nn.functional.linear(
        nn.functional.linear(w["x"], w["gate_up"])[:, :I], w["down"]))
