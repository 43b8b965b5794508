"""BFCL adapter (loom.evals.bfcl): BFCL's real data and checkers on the real default model, and the
adapter's own bookkeeping on hand-written records.

``bfcl-eval`` lives in ``.venv-bfcl`` (``make bfcl-env``: its pins would downgrade numpy and faiss in
``.venv``), so the end-to-end test runs the command there, in a subprocess; without that
environment it is skipped.  Everything else runs here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from loom.evals.bfcl import applies
from loom.evals.bfcl_run import _steps
from loom.evals.bfcl_score import groupings, summarize

ROOT = Path(__file__).resolve().parents[2]
BFCL_PYTHON = ROOT / ".venv-bfcl" / "bin" / "python"


def _rec(category: str, mode: str, valid: bool, calls: int = 1, schema_valid: int = 1, ms: float = 100.0) -> dict:
    return {"id": f"{category}_0", "category": category, "mode": mode, "valid": valid, "calls": calls,
            "schema_valid_calls": schema_valid, "ms": ms, "loom_error": None, "force_quit": False,
            "prompt_tokens": 10, "cached_tokens": 4, "completion_tokens": 3}


def test_summary_divides_wall_time_by_correct_entries_and_valid_calls_by_calls():
    recs = [_rec("simple_python", "constrained", True), _rec("simple_python", "constrained", False, 2, 1),
            _rec("simple_python", "constrained", True)]
    (s,) = summarize(recs, {("simple_python", "constrained"): 900.0})
    assert (s.count, s.correct, s.accuracy) == (3, 2, 2 / 3)
    assert s.schema_valid_rate == 3 / 4
    assert s.ms_per_correct == 450.0
    assert s.tokens == {"prompt": 30, "cached": 12, "completion": 9}


def test_non_live_ast_summary_is_the_unweighted_mean_of_the_four_ast_categories():
    recs = [_rec("simple_python", "free", True), _rec("multiple", "free", False), _rec("parallel", "free", True),
            _rec("parallel_multiple", "free", True), _rec("parallel_multiple", "free", True),
            _rec("irrelevance", "free", False)]
    groups = groupings(summarize(recs))["free"]
    assert groups == {"non_live_ast_summary": 0.75, "irrelevance": 0.0}


def test_non_live_ast_summary_is_left_out_when_a_category_was_not_run():
    assert "non_live_ast_summary" not in groupings(summarize([_rec("simple_python", "free", True)]))["free"]


def test_irrelevance_runs_only_unforced_because_a_forced_call_cannot_abstain():
    assert applies("irrelevance", "free")
    assert not applies("irrelevance", "constrained")
    assert applies("simple_python", "constrained")


def test_multi_turn_steps_group_calls_by_step_and_end_with_the_answer_text():
    call = SimpleNamespace  # a scripted RunResult: pure adapter logic, no model
    result = SimpleNamespace(final_state="done", answer="done.", tool_calls=[
        call(step=1, name="cd", arguments={"folder": "a"}, error=None),
        call(step=1, name="ls", arguments={}, error=None),
        call(step=2, name="cat", arguments={}, error="bad JSON")])
    assert _steps(result) == [[{"cd": '{"folder": "a"}'}, {"ls": "{}"}], [{"cat": ""}], "done."]


@pytest.fixture(scope="module")
def bfcl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run: the first simple_python entry forced, the first irrelevance entry unforced."""
    try:
        import bfcl_eval  # noqa: F401

        python = sys.executable
    except ImportError:
        if not BFCL_PYTHON.exists():
            pytest.skip("bfcl-eval is not installed here and .venv-bfcl is missing (make bfcl-env)")
        python = str(BFCL_PYTHON)
    out = tmp_path_factory.mktemp("bfcl")
    cmd = [python, "-m", "loom.evals.bfcl", "--categories", "simple_python,irrelevance", "--modes",
           "free,constrained", "--limit", "1", "--max-tokens", "32", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _scores(out: Path) -> dict[tuple[str, str], dict]:
    summary = json.loads((out / "summary.json").read_text())
    return {(c["category"], c["mode"]): c for c in summary["categories"]}


def test_forced_call_of_default_model_on_simple_python_0_is_schema_valid_and_passes_bfcl_ast_checker(bfcl_run):
    s = _scores(bfcl_run)[("simple_python", "constrained")]
    assert (s["count"], s["correct"], s["calls"], s["schema_valid_rate"]) == (1, 1, 1, 1.0)


def test_default_model_unforced_on_irrelevance_0_makes_no_call_so_bfcl_scores_it_right(bfcl_run):
    s = _scores(bfcl_run)[("irrelevance", "free")]
    assert (s["count"], s["correct"], s["calls"]) == (1, 1, 0)
    assert ("irrelevance", "constrained") not in _scores(bfcl_run)


def test_records_name_each_entry_and_mode_with_bfcls_verdict(bfcl_run):
    recs = [json.loads(line) for line in (bfcl_run / "records.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["mode"]) for r in recs) == [
        ("irrelevance_0", "free"), ("simple_python_0", "constrained"), ("simple_python_0", "free")]
    forced = next(r for r in recs if r["mode"] == "constrained")
    assert forced["result"] == [{"calculate_triangle_area": '{"base": 10, "height": 5}'}]
