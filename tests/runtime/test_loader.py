"""Model loading: safetensors with HF names into fused projections, the dummy
load format from a config-only folder, half-precision dtypes, clear errors."""

from __future__ import annotations

import pytest
import torch

from loom.runtime import SamplingParams
from loom.runtime.checkpoint import init_checkpoint
from loom.runtime.errors import NotFoundError
from tests.runtime.helpers import make_engine, random_prompts, run_to_completion


def test_fused_qkv_and_gate_up_hold_the_hf_tensors(tiny_checkpoint):
    from safetensors.torch import load_file

    path = tiny_checkpoint("qwen2")
    engine = make_engine(path)
    hf = load_file(str(path / "model.safetensors"))
    layer = engine.runner.model.model.layers[1]
    qkv = torch.cat([hf[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv"])
    assert torch.equal(layer.self_attn.qkv_proj.weight, qkv)
    assert torch.equal(
        layer.self_attn.qkv_proj.bias, torch.cat([hf[f"model.layers.1.self_attn.{p}_proj.bias"] for p in "qkv"])
    )
    gate_up = torch.cat([hf["model.layers.1.mlp.gate_proj.weight"], hf["model.layers.1.mlp.up_proj.weight"]])
    assert torch.equal(layer.mlp.gate_up_proj.weight, gate_up)


def test_dummy_load_format_builds_random_weights_from_config_alone(tmp_path):
    path = init_checkpoint(tmp_path / "cfg-only", arch="llama", preset="tiny", weights=False)
    assert not list(path.glob("*.safetensors"))
    engine = make_engine(path, load_format="dummy", seed=3)
    weight = engine.runner.model.model.layers[0].mlp.down_proj.weight
    assert abs(float(weight.std()) - engine.hf_config.initializer_range) < 0.02
    (prompt,) = random_prompts(engine.vocab_size, [10], seed=51)
    out = run_to_completion(engine, [("a", prompt, SamplingParams(max_tokens=5, ignore_eos=True, seed=1))])["a"]
    assert len(out.token_ids) == 5


def test_missing_weights_without_dummy_is_a_clear_error(tmp_path):
    path = init_checkpoint(tmp_path / "cfg-only", arch="qwen3", preset="tiny", weights=False)
    with pytest.raises(FileNotFoundError, match="safetensors"):
        make_engine(path)


def test_unknown_model_that_is_no_folder_raises_not_found(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NotFoundError, match="no-such-org/no-such-model"):
        make_engine("no-such-org/no-such-model")


def test_bfloat16_engine_keeps_weights_and_kv_cache_in_bfloat16(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    engine = make_engine(path, dtype="bfloat16", num_kv_blocks=32)
    assert engine.runner.kv_cache.dtype == torch.bfloat16
    assert engine.runner.model.lm_head.weight.dtype == torch.bfloat16
    (prompt,) = random_prompts(engine.vocab_size, [20], seed=52)
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=5)
    out = run_to_completion(engine, [("a", prompt, greedy)])["a"]
    ref = run_to_completion(make_engine(path), [("a", prompt, greedy)])["a"]
    # vLLM's rule for low precision: equal up to the first divergence, then each
    # side's token is among the other's top-5.
    for mine, theirs, lp_mine, lp_theirs in zip(out.token_ids, ref.token_ids, out.logprobs, ref.logprobs):
        if mine != theirs:
            assert mine in lp_theirs and theirs in lp_mine
            break


def test_an_unsupported_hidden_act_is_a_value_error_naming_the_field() -> None:
    from loom.runtime.models.llama import activation

    assert isinstance(activation("silu"), torch.nn.SiLU)
    with pytest.raises(ValueError, match="hidden_act: 'tanh_x'"):
        activation("tanh_x")
