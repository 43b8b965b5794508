"""Ctrl-C still writes what was measured; an unreachable HTTP target is one clear line; bad input is named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

# SIGINT as at a terminal: a test run started in the background (`make test &`) inherits SIGINT
# ignored, and asyncio then installs no Ctrl-C handler, so the run would not see the signal.
SCRIPT = """
import signal, sys, evals
signal.signal(signal.SIGINT, signal.default_int_handler)
res = evals.run("throughput", model=sys.argv[1], out=sys.argv[2], num_requests=400, warmup=0, concurrency=2,
                options={"output_min": 48, "output_max": 64}, engine={"device": "cpu", "num_kv_blocks": 1024})
print("INTERRUPTED" if res.interrupted else "DONE", flush=True)
"""


def test_ctrl_c_writes_partial_records_summary_and_report(tiny_model, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, tiny_model, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    records = out / "base" / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if records.exists() and len(records.read_text().splitlines()) >= 3:
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "INTERRUPTED" in stdout
    lines = [json.loads(x) for x in records.read_text().splitlines()]
    assert 3 <= len(lines) < 400
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["variants"]["base"]["benchmark"]["completed"] == len(lines)
    assert (out / "base" / "summary.json").exists() and (out / "report.html").exists()


def test_unreachable_http_target_is_one_clear_line(tmp_path):
    from loom.cli.eval import eval_app

    result = CliRunner().invoke(eval_app, ["run", "--suite", "throughput", "--target", "http://127.0.0.1:9",
                                           "--out", str(tmp_path)])
    assert result.exit_code == 2
    lines = [x for x in result.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert "error:" in lines[0] and "http://127.0.0.1:9 is unreachable" in lines[0]


def test_bad_arguments_are_named():
    from loom import evals

    with pytest.raises(ValueError, match="suite"):
        evals.run("nope", model="unused")
    with pytest.raises(ValueError, match="rate"):
        evals.run("throughput", rate=0)
    with pytest.raises(ValueError, match="compare: unknown setting 'enable_prefix_cachin'"):
        evals.run("throughput", compare=["enable_prefix_cachin=false"])
    with pytest.raises(ValueError, match="baseline"):
        evals.run("throughput", baseline="vllm")
    with pytest.raises(ValueError, match="target"):
        evals.run("throughput", target="localhost:8000")


def test_variant_settings_parse_to_engine_spec_and_budget():
    from loom.evals.settings import parse_variant, split_settings, variant_name

    v = parse_variant("enable_prefix_caching=false,max_num_seqs=4,speculative=ngram,num_speculative_tokens=3,"
                      "budget.max_retrieval_tokens=256")
    assert v["enable_prefix_caching"] is False and v["max_num_seqs"] == 4
    engine, budget = split_settings(v)
    assert engine["speculative_config"].method == "ngram"
    assert engine["speculative_config"].num_speculative_tokens == 3
    assert budget == {"max_retrieval_tokens": 256}
    assert split_settings({"speculative": "off"})[0] == {"speculative_config": None}
    assert variant_name({}) == "base"
    assert variant_name({"enable_prefix_caching": False}) == "enable_prefix_caching=false"
