"""``loom bench agents`` runs both systems on each pool and reports the figures the issue's goals read
(tiny random-weight checkpoint, two sessions, no retrieval: the mechanics, not the speed)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loom.cli.bench import bench_app


def test_bench_agents_prefills_only_new_tokens_at_a_full_pool_and_reports_each_system(tmp_path: Path):
    out = tmp_path / "agents.json"
    result = CliRunner().invoke(bench_app, ["agents", "--preset", "tiny", "--sessions", "2", "--turns", "2",
                                            "--k", "0", "--tool-ms", "20", "--think-ms", "20", "--pools", "100,25",
                                            "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["working_set_blocks"] > 0
    for pool in ("100%", "25%"):
        for system in ("lru", "retention", "retention+disk"):
            f = figures[f"{pool}/{system}"]
            assert f["job_completion_s"] > 0 and f["ttft_p99_ms"] >= f["ttft_p50_ms"] > 0
            assert set(f["prompt_misses"]) <= {"evicted", "expired", "new"}
    for system in ("lru", "retention"):  # a pool that holds every session: each call computes its new tokens only
        full = figures[f"100%/{system}"]
        assert full["computed_per_call"] == full["new_per_call"] and full["prompt_misses"].get("evicted", 0) == 0
    assert "retention" in result.output and "lru" in result.output
