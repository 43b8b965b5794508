"""Speculative decoding through ``loom serve``: acceptance shows on /metrics."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import Server


def _gauge(text: str, name: str) -> float:
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " "))


@pytest.mark.slow
def test_draft_model_equal_to_target_is_fully_accepted(checkpoint: Path, tmp_path: Path):
    srv = Server(checkpoint, f"sqlite:///{tmp_path / 's.db'}", tmp_path, "--no-auth", "--max-model-len", "512",
                 "--num-kv-blocks", "128", "--speculative-method", "draft_model", "--draft-model",
                 str(checkpoint), "--num-speculative-tokens", "3").start()
    try:
        model = httpx.get(srv.url + "/v1/models").json()["data"][0]["id"]
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=120, json={
            "model": model, "messages": [{"role": "user", "content": "go on"}], "max_tokens": 24, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 4
        metrics = httpx.get(srv.url + "/metrics").text
        # greedy with draft == target: every drafted token is accepted (Leviathan et al. 2023)
        assert _gauge(metrics, "loom_spec_decode_acceptance_rate") == 1.0
        assert _gauge(metrics, "loom_spec_decode_mean_acceptance_length") > 1.0
        assert _gauge(metrics, "loom_spec_decode_draft_tokens_total") > 0
    finally:
        srv.stop()
