"""Random-weight checkpoints: loading with transformers, arch features, tokenizer, chat template, CLI."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from loom.runtime.checkpoint import (
    ADDED_TOKENS,
    ARCHES,
    build_tokenizer,
    chat_template,
    count_parameters,
    ensure_checkpoint,
    init_checkpoint,
    model_config,
)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("arch", ARCHES)
def test_tiny_checkpoint_loads_with_transformers_and_generates(tiny_checkpoint, arch):
    path = tiny_checkpoint(arch)
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= names
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == arch
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer) == 4096
    assert model.config.tie_word_embeddings is False
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = tokenizer("def hello(): return 'world'", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    assert out.shape == (1, ids.shape[1] + 8)
    assert int(out.max()) < len(tokenizer)


def test_qwen2_has_qkv_bias_and_no_output_bias(tiny_checkpoint):
    attn = AutoModelForCausalLM.from_pretrained(tiny_checkpoint("qwen2")).model.layers[0].self_attn
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.bias is not None and proj.bias.abs().sum() > 0  # random, not zero
    assert attn.o_proj.bias is None


def test_qwen3_has_per_head_q_norm_and_k_norm(tiny_checkpoint):
    attn = AutoModelForCausalLM.from_pretrained(tiny_checkpoint("qwen3")).model.layers[0].self_attn
    assert attn.q_norm.weight.shape == (16,) and attn.k_norm.weight.shape == (16,)
    assert not torch.equal(attn.q_norm.weight, torch.ones(16))  # randomized, so it matters
    assert attn.q_proj.bias is None


def test_llama_has_no_attention_bias_or_qk_norm(tiny_checkpoint):
    attn = AutoModelForCausalLM.from_pretrained(tiny_checkpoint("llama")).model.layers[0].self_attn
    assert attn.q_proj.bias is None and not hasattr(attn, "q_norm")


def test_mistral_sliding_window_limits_attention_beyond_the_window(tiny_checkpoint):
    narrow = tiny_checkpoint("mistral", sliding_window=32)
    assert AutoConfig.from_pretrained(narrow).sliding_window == 32
    assert AutoConfig.from_pretrained(tiny_checkpoint("mistral")).sliding_window == 2048
    # Same seed, same weights: only the window differs, so logits agree inside it.
    m_narrow = AutoModelForCausalLM.from_pretrained(narrow)
    m_wide = AutoModelForCausalLM.from_pretrained(tiny_checkpoint("mistral"))
    ids = torch.arange(100, 164).unsqueeze(0)
    with torch.no_grad():
        a, b = m_narrow(ids).logits[0], m_wide(ids).logits[0]
    torch.testing.assert_close(a[:32], b[:32])
    assert not torch.allclose(a[40:], b[40:])


def test_same_seed_writes_identical_files_and_other_seed_differs(tmp_path):
    a = init_checkpoint(tmp_path / "a", "llama", seed=3)
    b = init_checkpoint(tmp_path / "b", "llama", seed=3)
    c = init_checkpoint(tmp_path / "c", "llama", seed=4)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert _sha(a / name) == _sha(b / name)
    assert _sha(a / "model.safetensors") != _sha(c / "model.safetensors")


def test_every_arch_shares_one_tokenizer(tiny_checkpoint):
    hashes = {_sha(tiny_checkpoint(arch) / "tokenizer.json") for arch in ARCHES}
    assert len(hashes) == 1


def test_tokenizer_round_trips_unicode_text(tok):
    text = "héllo wörld — 日本語テキスト 🎉🧵\n\tdef f(x):\n    return x**2  # ok\r\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert max(ids) < len(tok) - len(ADDED_TOKENS)  # plain text never maps to an added token


def test_added_tokens_are_single_ids_at_the_end_of_the_vocabulary(tok):
    base = len(tok) - len(ADDED_TOKENS)
    for i, (content, _) in enumerate(ADDED_TOKENS):
        assert tok.encode(content) == [base + i]
        assert tok.encode(f"a{content}b")[1:-1] == [base + i]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None


def test_skip_special_tokens_keeps_think_and_tool_markers(tok):
    ids = tok.encode("<|im_start|>assistant\n<think>\nr\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nr\n</think>\n\n<tool_call>\n{}\n</tool_call>"


def test_tokenizer_is_deterministic_and_vocab_size_is_configurable():
    assert build_tokenizer().backend_tokenizer.to_str() == build_tokenizer(4096).backend_tokenizer.to_str()
    small = build_tokenizer(300)
    assert len(small) == 300
    assert small.decode(small.encode("naïve café")) == "naïve café"
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(100)


def test_tiny_vocabulary_checkpoint_matches_its_tokenizer(tiny_checkpoint):
    path = tiny_checkpoint("qwen3", vocab_size=300)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.vocab_size == len(tokenizer) == 300
    assert model.lm_head.weight.shape == (300, 64)
    assert model.config.eos_token_id == tokenizer.eos_token_id == 300 - len(ADDED_TOKENS) + 2


def test_bad_arguments_raise_value_error_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match="arch"):
        init_checkpoint(tmp_path, arch="gpt2")
    with pytest.raises(ValueError, match="preset"):
        init_checkpoint(tmp_path, preset="huge")
    with pytest.raises(ValueError, match="sliding_window"):
        init_checkpoint(tmp_path, arch="llama", sliding_window=32)  # llama has no window
    with pytest.raises(ValueError, match="vocab_size"):
        init_checkpoint(tmp_path, vocab_size=200)
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_small_preset_has_about_60m_parameters():
    n = count_parameters("qwen3", "small")  # on the meta device: no memory
    embed = 2 * 4096 * 640  # untied input and output embeddings
    attn = 640 * 640 * 2 + 640 * 320 * 2 + 2 * 64
    layer = attn + 3 * 640 * 2304 + 2 * 640
    assert n == embed + 10 * layer + 640 == 61_782_400
    assert 55e6 < count_parameters("llama", "small") < 65e6


def test_weightless_folder_has_config_tokenizer_and_architecture(tmp_path):
    path = init_checkpoint(tmp_path / "d", "qwen3", "0.6b", weights=False)
    assert not (path / "model.safetensors").exists()
    cfg = AutoConfig.from_pretrained(path)
    assert cfg.architectures == ["Qwen3ForCausalLM"] and cfg.num_hidden_layers == 28
    written, expected = cfg.to_diff_dict(), model_config("qwen3", "0.6b").to_diff_dict()
    assert {k: written[k] for k in expected if k != "transformers_version"} == {
        k: v for k, v in expected.items() if k != "transformers_version"
    }
    assert len(AutoTokenizer.from_pretrained(path)) == cfg.vocab_size == 4096
    # Qwen3-0.6B minus the 151,936 -> 4,096 vocabulary (tied embeddings).
    assert count_parameters("qwen3", "0.6b") == 596_049_920 - (151_936 - 4_096) * 1024


def test_ensure_checkpoint_creates_once_then_reuses(tmp_path):
    first = ensure_checkpoint("qwen2", "tiny", cache_dir=tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = ensure_checkpoint("qwen2", "tiny", cache_dir=tmp_path)
    assert again == first and (again / "model.safetensors").stat().st_mtime_ns == stamp
    other = ensure_checkpoint("qwen2", "tiny", cache_dir=tmp_path, seed=1)
    assert other != first
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other.name])  # no temp dirs


def test_tokenizer_config_carries_the_chat_template(tiny_checkpoint):
    cfg = json.loads((tiny_checkpoint("qwen3") / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == chat_template()
    assert AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3")).chat_template == chat_template()


def test_loom_model_init_writes_a_loadable_checkpoint(tmp_path):
    from typer.testing import CliRunner

    from loom.cli import build_app

    app = build_app()
    runner = CliRunner()
    out = tmp_path / "ckpt"
    result = runner.invoke(app, ["model", "init", "--arch", "qwen2", "--preset", "tiny", "--seed", "5", str(out)])
    assert result.exit_code == 0, result.output
    assert "598,592 parameters" in " ".join(result.output.split())
    assert AutoConfig.from_pretrained(out).model_type == "qwen2"
    bad = runner.invoke(app, ["model", "init", "--arch", "gpt2", str(tmp_path / "bad")])
    assert bad.exit_code != 0 and "arch must be one of" in bad.output
    for args in (["model", "init", "--help"], ["bench", "--help"]):
        helped = runner.invoke(app, args)
        assert helped.exit_code == 0 and "Example" in helped.output
