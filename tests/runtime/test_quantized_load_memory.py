"""Loading the real default model quantized from Loom's cache holds no float copy: the peak
resident memory the load adds stays within 1.5x the quantized weights (a fresh process whose
``VmHWM`` is its own; imports, and the library code a model build pages in, are counted
before the load starts).  The test session's ``$LOOM_CACHE`` is used as it is: a first load fills it
(the quantized figures of a cold cache are the float model's plus the quantization's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LOAD = r"""
import json, sys, torch
from pathlib import Path
from loom.runtime.models.loader import load_hf_config, load_model
from loom.runtime.quantization import quantized_bytes
import transformers, safetensors
path = Path(sys.argv[1]); cfg = load_hf_config(path)
from loom.runtime.models.llama import LlamaForCausalLM
with torch.device("meta"):  # a model build pages in ~30 MiB of library code and allocator arenas: count them first
    LlamaForCausalLM(cfg, None)
from loom.runtime.bench.throughput import peak_rss_mib
peak = lambda: peak_rss_mib() * 2**20
before = peak()
model = load_model(path, cfg, dtype=torch.float32, device=torch.device("cpu"), quantization=sys.argv[2])
print(json.dumps({"added": peak() - before, "weights": quantized_bytes(model)}))
"""


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_a_cached_quantized_load_adds_at_most_one_and_a_half_times_its_weights(real_model, method):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def load() -> dict:
        out = subprocess.run([sys.executable, "-c", LOAD, str(real_model), method], env=env, check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    cached = load()
    if cached["added"] > 1.5 * cached["weights"]:  # a cold cache: that load quantized the float model into it
        cached = load()
    assert cached["added"] <= 1.5 * cached["weights"], cached
