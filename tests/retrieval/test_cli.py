"""``loom ingest`` / ``loom search`` through typer's CliRunner (real index on disk)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from loom.cli.ingest import ingest, search

app = typer.Typer()
app.command("ingest")(ingest)
app.command("search")(search)
runner = CliRunner()


def test_cli_ingest_prints_summary_and_search_prints_json(tmp_path: Path, corpus: Path,
                                                         embedder) -> None:
    idx = tmp_path / "idx"
    res = runner.invoke(app, ["ingest", str(corpus), "--index", str(idx), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "4 documents (4 new/changed, 0 unchanged): +6 chunks" in res.output
    res = runner.invoke(app, ["ingest", str(corpus), "--index", str(idx), "--no-progress"])
    assert "+0 chunks, -0, 6 in index" in res.output

    res = runner.invoke(app, ["search", "--index", str(idx), "os.path.splitext", "--k", "2",
                              "--json"])
    assert res.exit_code == 0, res.output
    hits = [json.loads(line) for line in res.output.splitlines() if line.startswith("{")]
    assert len(hits) == 2
    assert hits[0]["section"] == "Path handling > Splitting"
    assert set(hits[0]) == {"chunk_id", "score", "similarity", "sentence_similarity", "related", "document",
                            "title", "section", "text", "metadata"}

    res = runner.invoke(app, ["search", "--index", str(idx), "sourdough", "--k", "1"])
    assert res.exit_code == 0 and "Bread" in res.output


def test_search_marks_the_hits_an_agent_would_show_its_model_as_related(tmp_path: Path, corpus: Path,
                                                                         embedder) -> None:
    """Every hit is listed; ``related`` follows the agents' rule (loom.orchestrator.relevance)."""
    idx = tmp_path / "idx"
    assert runner.invoke(app, ["ingest", str(corpus), "--index", str(idx), "--no-progress"]).exit_code == 0
    res = runner.invoke(app, ["search", "--index", str(idx), "How do I split the extension from a path?",
                              "--k", "3", "--json"])
    hits = [json.loads(line) for line in res.output.splitlines() if line.startswith("{")]
    assert res.exit_code == 0 and len(hits) == 3
    assert hits[0]["related"] and hits[0]["section"] == "Path handling > Splitting" and hits[0]["similarity"] >= 0.425
    assert not any(h["related"] for h in hits if "Bread" in h["section"])
    res = runner.invoke(app, ["search", "--index", str(idx), "What is the capital of Peru?", "--k", "2"])
    assert res.exit_code == 0 and "nothing here is related to the query" in " ".join(res.output.split())
    res = runner.invoke(app, ["search", "--index", str(idx), "What is the capital of Peru?", "--k", "2", "--json",
                              "--similarity-cutoff", "none"])
    assert [json.loads(line)["related"] for line in res.output.splitlines() if line.startswith("{")] == [True, True]


def test_cli_glob_limits_the_files_ingested(tmp_path: Path, corpus: Path, embedder) -> None:
    idx = tmp_path / "idx"
    res = runner.invoke(app, ["ingest", str(corpus), "--index", str(idx), "--glob", "*.txt",
                              "--no-progress"])
    assert res.exit_code == 0 and "1 documents" in res.output


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["search", "--index", str(tmp_path / "none"), "x"])
    assert res.exit_code == 2 and "no retrieval index" in res.output
    res = runner.invoke(app, ["search", "--index", str(tmp_path / "none"), "x", "--similarity-cutoff", "high"])
    assert res.exit_code == 2 and "--similarity-cutoff: must be auto, none or a number" in res.output
    res = runner.invoke(app, ["ingest", str(tmp_path / "missing"), "--index", str(tmp_path / "i")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_loom_console_script_mounts_ingest_and_search(tmp_path: Path, corpus: Path,
                                                      embedder) -> None:
    """``loom search`` through the console script's own app (``loom.cli.build_app``, what ``loom`` runs),
    in process: a subprocess would only add an interpreter start."""
    from loom.cli import build_app
    from loom.retrieval import Retriever

    idx = tmp_path / "idx"
    Retriever.open(idx, embedder=embedder).ingest([corpus / "notes.txt"], show_progress=False)
    out = CliRunner().invoke(build_app(), ["search", "--index", str(idx), "tomatoes", "--k", "1", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.splitlines()[0])["title"] == "Garden notes"
    assert "ingest" in CliRunner().invoke(build_app(), ["--help"]).output
