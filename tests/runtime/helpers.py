"""Helpers for runtime tests: engines over tiny random checkpoints, the
transformers greedy reference (float32, ``model.generate(do_sample=False)``)
and a stepping loop that checks block accounting after every step."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from loom.runtime import EngineConfig, SamplingParams
from loom.runtime.checkpoint import ARCHES  # noqa: F401  (re-exported for the tests)
from loom.runtime.engine import LLMEngine
from loom.runtime.outputs import RequestOutput

# Mistral with a window shorter than the prompts, so sliding-window attention is exercised.
ARCH_OVERRIDES = {"mistral": {"sliding_window": 32}}

_HF_MODELS: dict[Path, object] = {}
_HF_CACHE: dict[tuple[Path, tuple[int, ...]], list[int]] = {}


def make_engine(path: Path, **kw) -> LLMEngine:
    kw.setdefault("num_kv_blocks", 512)
    kw.setdefault("max_model_len", 1024)
    return LLMEngine(EngineConfig(model=str(path), **kw))


def random_prompts(vocab: int, lengths: Sequence[int], seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def _hf_model(path: Path):
    from transformers import AutoModelForCausalLM

    if path not in _HF_MODELS:
        _HF_MODELS[path] = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    return _HF_MODELS[path]


def _hf_generate(path: Path, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """One left-padded ``model.generate`` call; EOS disabled so every row runs the full length."""
    model = _hf_model(path)
    cfg = copy.deepcopy(model.generation_config)
    cfg.eos_token_id = None
    cfg.do_sample = False
    cfg.max_new_tokens = max_new_tokens
    cfg.pad_token_id = 0
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    # An explicit mask: without it transformers also masks prompt tokens equal to pad_token_id.
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, generation_config=cfg)
    return out[:, width:].tolist()


def hf_greedy(path: Path, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """Tokens transformers generates greedily for ``prompt`` (EOS ignored, exact length).

    A greedy run's first ``n`` tokens are the run of ``n`` tokens (each step sees only the tokens before
    it), so a longer run already made for ``prompt`` answers with its prefix instead of a new ``generate``:
    on the real model each reference token is a float32 forward pass of ~90 ms on one thread.
    """
    key = (path, tuple(prompt))
    made = _HF_CACHE.get(key)
    if made is None or len(made) < max_new_tokens:
        made = _HF_CACHE[key] = _hf_generate(path, [prompt], max_new_tokens)[0]
    return made[:max_new_tokens]


def hf_greedy_many(path: Path, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int]) -> list[list[int]]:
    """``hf_greedy`` for many prompts in one left-padded batch (greedy prefixes are
    independent of the length asked for, so each row is cut to its own length)."""
    rows = _hf_generate(path, prompts, max(max_new_tokens))
    return [row[:n] for row, n in zip(rows, max_new_tokens)]


def run_to_completion(
    engine: LLMEngine,
    submissions: Sequence[tuple[str, Sequence[int], SamplingParams]] = (),
    *,
    check_invariants: bool = True,
    max_steps: int = 100_000,
) -> dict[str, RequestOutput]:
    """Submit, step until idle, checking block accounting after every step."""
    for request_id, prompt, params in submissions:
        engine.add_request(prompt, params, request_id=request_id)
    final: dict[str, RequestOutput] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
        if check_invariants:
            engine.kv.check_invariants(engine.requests.values())
    assert not engine.has_unfinished_requests()
    return final


def assert_pool_idle(engine: LLMEngine) -> None:
    """Every block is free once no request is in flight."""
    stats = engine.stats()
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert all(b.ref_cnt == 0 for b in engine.kv.blocks)
    engine.kv.check_invariants([])


def q8_0_rows(x: torch.Tensor, max_code: int = 127) -> torch.Tensor:
    """``x [M, K]`` as Loom's integer decode kernels read it: rounded to llama.cpp's Q8_0 blocks (32 values,
    symmetric, one scale ``max|x| / max_code`` each, ties to even; ``max_code`` 63 for 7-bit codes), back in
    float32."""
    blocks = x.double().reshape(x.shape[0], -1, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / max_code
    return (torch.round(blocks / torch.where(scale > 0, scale, 1)) * scale).reshape(x.shape).float()


def gguf_only_folder(real_model: Path, dest: Path) -> Path:
    """The default model's converted folder as a pull leaves it: config and tokenizer, weights in the GGUF."""
    import json
    import shutil

    from loom.runtime.checkpoint.gguf import SOURCE_FILE, gguf_source
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_gguf

    shutil.copytree(real_model, dest, ignore=shutil.ignore_patterns("*.safetensors*"))
    gguf = ensure_gguf(SMALL_MODEL)
    (dest / SOURCE_FILE).write_text(json.dumps({"path": str(gguf), "gguf": gguf.name}))
    assert gguf_source(dest) == gguf
    return dest
