"""Every ``loom`` sub-command's failure path, run as the user runs it (a real subprocess): exit code
not 0, exactly one ``error:`` line, never a traceback; ``-v`` adds the traceback of an unexpected error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.api.server import _env
from tests.cli.helpers import run_all

# name -> (arguments, exit code, text the error line contains); {tmp} is a fresh folder
CASES = {
    "serve_unknown_model": (["serve", "no-such-model-xyz", "--no-auth", "--port", "0"], 2, "no-such-model-xyz"),
    "chat_missing_index": (["chat", "--index", "{tmp}/no-index"], 2, "no retrieval index"),
    "chat_blank_no_match_answer": (["chat", "--index", "{tmp}", "--no-match-answer", " "], 2,
                                   "--no-match-answer: needs --index and a non-empty text"),
    "chat_no_match_answer_without_index": (["chat", "--no-match-answer", "Not in the docs."], 2,
                                           "--no-match-answer: needs --index"),
    "chat_always_answer_and_no_match_answer": (["chat", "--index", "{tmp}", "--always-answer", "--no-match-answer",
                                                "No."], 2, "--always-answer and --no-match-answer: give one"),
    "chat_verifier_without_index": (["chat", "--verifier-model", "qwen2.5-coder-1.5b-instruct"], 2,
                                    "--verifier-model: judges documentation answers, so it needs --index"),
    "chat_verifier_always_answer": (["chat", "--index", "{tmp}", "--always-answer", "--verifier-model",
                                     "qwen2.5-coder-1.5b-instruct"], 2, "--verifier-model: judges documentation"),
    "ingest_missing_path": (["ingest", "{tmp}/no/such/file.md", "--index", "{tmp}/index"], 2, "does not exist"),
    "model_pull_unknown": (["model", "pull", "no-such-model-xyz"], 2, "unknown model 'no-such-model-xyz'"),
    "model_pull_near_miss": (["model", "pull", "smollm2"], 2, "did you mean smollm2-135m-instruct?"),
    "model_rm_unknown": (["model", "rm", "no-such-model-xyz"], 2, "unknown model 'no-such-model-xyz'"),
    "eval_unknown_suite": (["eval", "run", "--suite", "nope"], 2, "suite: must be one of"),
    "search_without_index": (["search", "x"], 2, "Missing option '--index'"),
    "search_missing_index": (["search", "x", "--index", "{tmp}/no-index"], 2, "no retrieval index"),
    "keys_bad_db": (["keys", "list", "--db", "nodriver://x"], 2, "database 'nodriver://x' cannot be opened"),
    "bench_bad_option": (["bench", "throughput", "--no-such-option"], 2, "No such option: --no-such-option"),
    "unknown_command": (["no-such-command"], 2, "No such command"),
    # nothing catches a missing run folder: the one place every error becomes one line does
    "eval_report_unexpected": (["eval", "report", "{tmp}/no-run"], 1, "FileNotFoundError"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Every case at once (each is ~1 s of imports, mostly waiting on the same files), plus ``-v``."""
    tmp = tmp_path_factory.mktemp("cli-failures")
    cases = {name: [a.format(tmp=tmp) for a in args] for name, (args, _, _) in CASES.items()}
    cases["eval_report_verbose"] = ["-v", *cases["eval_report_unexpected"]]
    return run_all(cases, tmp, _env(), timeout=300)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failure_is_one_error_line_and_no_traceback(runs, case: str) -> None:
    _, code, text = CASES[case]
    run = runs[case]
    assert run.returncode == code, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and text in errors[0], run.stderr
    assert "error:" not in run.stdout


def test_an_unexpected_error_names_its_type_and_how_to_see_the_traceback(runs) -> None:
    (line,) = [x for x in runs["eval_report_unexpected"].stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: FileNotFoundError: ") and line.endswith("(loom -v shows the traceback)")


def test_verbose_shows_the_traceback_then_the_same_one_line(runs) -> None:
    run = runs["eval_report_verbose"]
    assert run.returncode == 1
    assert "Traceback (most recent call last)" in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: FileNotFoundError: ")


def test_a_missing_path_creates_no_index(runs) -> None:
    assert not Path(runs["ingest_missing_path"].args[-1]).exists()
