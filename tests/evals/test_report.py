"""The eval report on real runs of the tiny random-weight model: cached vs computed tokens stacked per class,
panels without data left out, GPU cost labelled hypothetical off CUDA, the demo's closing eval printing its
comparison table, and the report without matplotlib (the ``eval`` extra)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from loom import evals
from loom.evals import plots
from loom.cli.demo import closing_eval
from loom.evals.prices import Prices
from loom.evals.report import PLOTS_NEED_EXTRA

ROOT = Path(__file__).resolve().parents[2]
CPU_LABEL = "hypothetical: priced as if on H100 at 2.00 USD/h (this run was on CPU)"
ENGINE = {"device": "cpu", "num_kv_blocks": 512}


@pytest.fixture(scope="module")
def demo_eval(tiny_model, tmp_path_factory):
    """The demo's closing eval (sessions, prefix caching on vs off), made small: 2 chats x 3 turns."""
    console = Console(file=io.StringIO(), record=True, width=130, highlight=False)
    res = closing_eval(console, tiny_model, tmp_path_factory.mktemp("demo"), num_requests=2, warmup=1,
                       options={"turns": 3, "system_tokens": 200, "user_tokens": 32, "output_tokens": 8},
                       engine=ENGINE)
    return res, console.export_text()


@pytest.fixture(scope="module")
def one_token_run(tiny_model, tmp_path_factory):
    """One variant, single-turn, one output token each, no GPU price: no TPOT, ITL, turns, spec or GPU cost."""
    return evals.run("throughput", model=tiny_model, out=tmp_path_factory.mktemp("one"), num_requests=4, warmup=0,
                     options={"prompt_max": 64, "output_min": 1, "output_max": 1}, prices=Prices(gpu_second=0.0),
                     engine=ENGINE)


@pytest.fixture(scope="module")
def spec_run(tiny_model, tmp_path_factory):
    return evals.run("spec", model=tiny_model, out=tmp_path_factory.mktemp("spec"), num_requests=2, warmup=0,
                     options={"prompt_tokens": 96, "output_tokens": 32}, engine=ENGINE)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt  # here, not at collection (about a second of imports on each worker)

    plt.close("all")


def _drawn(res) -> set[str]:
    return {p.stem for p in (res.out_dir / "plots").glob("*.png")}


def test_demo_closing_eval_prints_its_comparison_table_not_just_a_path(demo_eval):
    res, out = demo_eval
    assert "comparison (ratio to base)" in out
    header = next(line for line in out.splitlines() if "metric" in line)
    assert "base" in header and "enable_prefix_caching=false" in header
    hit = next(line for line in out.splitlines() if "prefix hit rate" in line)
    assert re.search(r"│\s+0 \(0\.00x\) │", hit), hit  # caching off: no hits, ratio 0 to caching on
    for metric in ("TTFT median ms", "output tok/s", "token $ / request", "GPU $ / request (hypothetical)"):
        assert metric in out, metric
    assert f"GPU cost: {CPU_LABEL}" in out
    assert f"eval report: {res.report_path}" in out.replace("\n", "")


def test_class_tokens_bars_stack_cached_on_computed_for_each_class(demo_eval):
    res, _ = demo_eval
    fig = plots.class_tokens(res.variants)
    assert [ax.get_title() for ax in fig.axes] == ["base (prompt tokens cached: "
                                                   f"{res.variants['base']['prefix_cache']['hit_rate']:.0%})",
                                                   "enable_prefix_caching=false (prompt tokens cached: 0%)"]
    for ax, (name, s) in zip(fig.axes, res.variants.items()):
        classes = [t.get_text() for t in ax.get_xticklabels()]
        assert classes == ["system", "history", "user", "output"]  # the classes with tokens, ledger order
        computed, cached = ax.containers
        for cls, c_bar, h_bar in zip(classes, computed.patches, cached.patches):
            c = s["classes"][cls]
            assert c_bar.get_y() == 0 and c_bar.get_height() == c["computed_tokens"]
            assert h_bar.get_y() == c["computed_tokens"] and h_bar.get_height() == c["cached_tokens"]
            assert c_bar.get_height() + h_bar.get_height() == c["tokens"] > 0
    on, off = res.variants["base"]["classes"], res.variants["enable_prefix_caching=false"]["classes"]
    assert on["history"]["cached_tokens"] > 0 and on["system"]["cached_tokens"] > 0
    assert off["history"]["cached_tokens"] == off["system"]["cached_tokens"] == 0


def test_sessions_report_leaves_out_the_speculation_panel_and_rows(demo_eval):
    res, _ = demo_eval
    assert _drawn(res) == {"latency_cdf", "class_tokens", "class_time", "class_cost", "turns"}
    page = res.report_path.read_text()
    assert "spec_acceptance" not in page and "no speculative" not in page and "spec acceptance" not in page
    assert all(r["metric"] != "spec acceptance" for r in res.summary["comparison"]["rows"])
    # no tool calls in a sessions run: no tool classes on the token axis
    ticks = {t.get_text() for ax in plots.class_tokens(res.variants).axes for t in ax.get_xticklabels()}
    assert not ticks & {"tools", "tool_call", "tool_result", "spec_rejected", "recompute"}


def test_cpu_run_labels_gpu_cost_hypothetical_in_summary_table_and_plot(demo_eval):
    res, _ = demo_eval
    for s in res.variants.values():
        assert s["device"] == {"type": "cpu", "name": None}
        assert s["cost"]["gpu_cost_hypothetical"] is True and s["cost"]["gpu_cost_label"] == CPU_LABEL
    page = res.report_path.read_text()
    assert f"GPU cost: {CPU_LABEL}" in page
    assert "<th>GPU $ (hypothetical)</th>" in page and "<td>GPU cost USD (hypothetical)</td>" in page
    token_ax, gpu_ax = plots.class_cost(res.variants).axes[:2]
    assert token_ax.get_title() == "token cost by token class (price table)"
    assert gpu_ax.get_title() == f"GPU cost by token class\n{CPU_LABEL}"


def test_one_token_run_leaves_out_tpot_itl_turns_spec_gpu_cost_and_comparison(one_token_run):
    res = one_token_run
    assert all(r["output_tokens"] == 1 for r in res.results[0].records)
    assert _drawn(res) == {"latency_cdf", "class_tokens", "class_time", "class_cost"}
    assert [ax.get_title() for ax in plots.latency_cdf({"base": res.results[0].records}).axes] == \
        ["TTFT CDF", "E2EL CDF"]
    assert [ax.get_title() for ax in plots.class_cost(res.variants).axes] == \
        ["token cost by token class (price table)"]
    page = res.report_path.read_text()
    assert "<h2>Comparison</h2>" not in page and "nothing to compare" not in page
    assert "<h2>Benchmark (vLLM definitions)</h2>" in page


def test_spec_run_draws_acceptance_per_position_and_leaves_out_turns(spec_run):
    assert _drawn(spec_run) == {"latency_cdf", "class_tokens", "class_time", "class_cost", "spec_acceptance"}
    on = spec_run.variants["speculative=ngram,num_speculative_tokens=4"]["spec"]
    (ax,) = plots.spec_acceptance(spec_run.variants).axes
    (line,) = ax.get_lines()  # only the variant that drafted
    assert list(line.get_ydata()) == on["acceptance_per_position"] and len(on["acceptance_per_position"]) == 4
    assert "spec acceptance" in {r["metric"] for r in spec_run.summary["comparison"]["rows"]}


def test_evals_modules_other_than_plots_do_not_import_matplotlib():
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        from loom import evals
        names = [m.name for m in pkgutil.walk_packages(evals.__path__, "loom.evals.") if m.name != "loom.evals.plots"]
        for name in names:
            importlib.import_module(name)
        assert "loom.evals.report" in names and "loom.evals.harness" in names
        print(sorted(k for k in sys.modules if k.split(".")[0] == "matplotlib"))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_eval_report_without_matplotlib_prints_one_line_and_writes_the_tables(demo_eval, tmp_path):
    res, _ = demo_eval
    out_dir = tmp_path / "run"
    shutil.copytree(res.out_dir, out_dir, ignore=shutil.ignore_patterns("plots", "report.html"))
    code = ("import sys; sys.modules['matplotlib'] = None; from loom.cli import main; "
            f"sys.argv = ['loom', 'eval', 'report', {str(out_dir)!r}]; main()")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = (out.stdout + out.stderr).splitlines()
    assert [line for line in lines if "matplotlib" in line or "eval extra" in line] == \
        [next(line for line in lines if line.endswith(PLOTS_NEED_EXTRA))]
    assert "Traceback" not in out.stderr and out.stdout.strip() == str(out_dir / "report.html")
    page = (out_dir / "report.html").read_text()
    assert "<h2>Comparison</h2>" in page and "<h2>Tokens, time and cost per class</h2>" in page
    assert "<img" not in page and not (out_dir / "plots").exists()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_gpu_run_labels_gpu_cost_plainly(tiny_model, tmp_path):
    import torch

    res = evals.run("throughput", model=tiny_model, out=tmp_path, num_requests=2, warmup=0,
                    options={"prompt_max": 64, "output_min": 4, "output_max": 4}, engine={"device": "cuda"})
    s = res.variants["base"]
    assert s["device"] == {"type": "cuda", "name": torch.cuda.get_device_name(0)}
    assert s["cost"]["gpu_cost_hypothetical"] is False and s["cost"]["gpu_cost_label"] == "H100 at 2.00 USD/h"
    assert "hypothetical" not in res.report_path.read_text()
    assert plots.class_cost(res.variants).axes[-1].get_title() == "GPU cost by token class\nH100 at 2.00 USD/h"
