"""``loom search`` lists every hit, marked related or not by the rule agents apply before a model sees
a hit (``loom.orchestrator.relevance``), over a real MiniLM index; run in-process through the command's
own entry point (``loom.cli.main``), which is what the console script calls."""

from __future__ import annotations

import json

import pytest

from loom.cli import main
from loom.retrieval import Retriever
from loom.retrieval.types import Document, Section

DOCS = [
    ("guide:kv", "KV cache", [
        ("Paged attention", "The KV cache is split into fixed-size blocks addressed by a block table."),
        ("Prefix caching", "Blocks whose token prefix was seen before are reused instead of recomputed."),
    ]),
    ("guide:cooking", "Cooking", [("Bread", "Knead the dough for ten minutes and let it rise for an hour.")]),
]  # fmt: skip


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    path = tmp_path_factory.mktemp("index")
    Retriever(path).add_documents(Document(id=d, title=t, sections=tuple(Section(h, x) for h, x in s))
                                  for d, t, s in DOCS)
    return path


def _search(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["search", *args])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_json_marks_the_hits_an_agent_would_show_as_related(index, capsys):
    code, out, _ = _search(capsys, "--index", str(index), "how are KV cache blocks reused?", "--k", "3", "--json")
    hits = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(hits) == 3
    assert hits[0]["related"] and hits[0]["document"] == "guide:kv" and hits[0]["similarity"] >= 0.425
    assert [h["related"] for h in hits if h["document"] == "guide:cooking"] == [False]


def test_a_query_the_index_knows_nothing_about_has_no_related_hit_and_the_table_says_so(index, capsys):
    code, out, _ = _search(capsys, "--index", str(index), "What is the capital of Peru?", "--k", "2")
    assert code == 0 and "2 hits" in out
    assert "nothing here is related to the query" in " ".join(out.split())
    code, out, _ = _search(capsys, "--index", str(index), "What is the capital of Peru?", "--k", "2", "--json",
                           "--similarity-cutoff", "none")
    assert code == 0 and [json.loads(line)["related"] for line in out.splitlines()] == [True, True]


def test_a_bad_cutoff_is_one_error_line_naming_the_flag(index, capsys):
    code, _, err = _search(capsys, "--index", str(index), "x", "--similarity-cutoff", "high")
    assert code == 2 and "--similarity-cutoff" in err and "Traceback" not in err
