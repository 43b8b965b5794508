"""The engine's per-phase host time (``step_times``), which ``loom bench overhead`` prints."""

from __future__ import annotations

from loom.runtime.bench.overhead import HOST_PHASES, measure
from loom.runtime.engine import STEP_PHASES


def test_every_phase_is_timed_and_host_work_excludes_the_model(tiny_checkpoint):
    r = measure(str(tiny_checkpoint("qwen3")), batch=4, steps=3, params_kw={"temperature": 1.0, "top_p": 0.9})
    assert set(STEP_PHASES) <= set(r)
    assert all(r[p] > 0 for p in STEP_PHASES)
    assert "model" not in HOST_PHASES
    assert abs(r["host"] - sum(r[p] for p in HOST_PHASES)) < 1e-6
    assert r["wall"] >= r["host"]
