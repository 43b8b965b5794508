"""The qa suite: containment scoring on hand-made answers, and a small real run with and
without retrieval on the default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest

from loom import evals
from loom.evals.qa import qa_quality, question_by_id, score_answer
from loom.evals.records import OUTPUT_CLASSES, PROMPT_CLASSES

QUESTIONS = ["json-sort-keys", "os-path-join-absolute"]


def test_matching_is_case_insensitive_and_ignores_whitespace_runs():
    s = score_answer("Pass `SORT_KEYS=True`.", [["sort_keys"]])
    assert s.correct and s.matched == ("sort_keys",) and s.fraction == 1.0
    assert score_answer("earlier parts are\n   thrown   away", [["discard", "thrown away"]]).matched == ("thrown away",)
    assert not score_answer("use the key argument", [["sort_keys"]]).correct


def test_facts_match_as_whole_tokens_never_inside_longer_words():
    assert not score_answer("It returns 10.", [["0"]]).correct
    assert not score_answer("The directory must be non-empty.", [["empty"]]).correct
    assert not score_answer("Set the indentation.", [["indent"]]).correct
    assert score_answer("The directory must be empty.", [["empty"]]).correct
    assert score_answer("Pass indent=4.", [["indent"]]).correct  # punctuation bounds a token
    assert score_answer("A year has 8,760 hours.", [["8760"]]).correct  # thousands separators are dropped
    assert not score_answer("8,7601", [["8760"]]).correct


def test_every_fact_is_required_and_any_alternative_counts():
    facts = [["total"], ["used"], ["free"]]
    partial = score_answer("It has total and free space.", facts)
    assert not partial.correct and partial.matched == ("total", None, "free")
    assert partial.fraction == pytest.approx(2 / 3)
    assert score_answer("total, used and free bytes", facts).correct
    assert score_answer("(',',':')", [["(',', ':')", "(',',':')"]]).matched == ("(',',':')",)
    with pytest.raises(ValueError, match="facts"):
        score_answer("x", [])
    with pytest.raises(ValueError, match="facts"):
        score_answer("x", [[]])


def test_quality_block_counts_accuracy_per_module_and_cost_per_correct_answer():
    recs = [{"ok": True, "correct": True, "fact_fraction": 1.0, "module": "json", "output_tokens": 10, "cost": 0.3},
            {"ok": True, "correct": False, "fact_fraction": 0.5, "module": "json", "output_tokens": 20, "cost": 0.3},
            {"ok": False, "correct": False, "fact_fraction": 0.0, "module": "re", "output_tokens": 0, "cost": 0.0}]
    q = qa_quality(recs)
    assert (q["questions"], q["correct"], q["failed"]) == (3, 1, 1)
    assert q["accuracy"] == pytest.approx(1 / 3) and q["fact_recall"] == pytest.approx(0.5)
    assert q["mean_answer_tokens"] == pytest.approx(10.0)
    assert q["token_cost_per_correct_usd"] == pytest.approx(0.6)
    assert q["by_module"] == {"json": {"correct": 1, "questions": 2}, "re": {"correct": 0, "questions": 1}}
    assert qa_quality([])["accuracy"] == 0.0


def test_workload_is_every_question_by_default_or_a_seeded_sample_or_named_ids():
    from loom.evals.qa import load_questions
    from loom.evals.workloads import build

    ids = [q.id for q in load_questions()]
    full = build("qa", None)
    assert [c.id for c in full.conversations] == ids and full.variants == [{"retrieval": "on"}, {"retrieval": "off"}]
    assert not full.ignore_eos and [c.turns[0].user for c in full.warmup][:1] != [full.conversations[0].turns[0].user]
    sample = [c.id for c in build("qa", None, seed=1, num_requests=10).conversations]
    assert len(set(sample)) == 10 and sample == [i for i in ids if i in sample]  # file order
    assert sample == [c.id for c in build("qa", None, seed=1, num_requests=10).conversations]
    assert sample != [c.id for c in build("qa", None, seed=2, num_requests=10).conversations]
    named = build("qa", None, options={"questions": "re-subn,json-sort-keys"})
    assert [c.id for c in named.conversations] == ["re-subn", "json-sort-keys"]
    with pytest.raises(ValueError, match="unknown ids"):
        build("qa", None, options={"questions": "no-such-question"})


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    return evals.run("qa", out=tmp_path_factory.mktemp("qa"), warmup=0, report=False,
                     options={"questions": ",".join(QUESTIONS), "output_tokens": 32,
                              "corpus": "stdlib:module/json,stdlib:module/os.path",
                              "index_dir": str(tmp_path_factory.mktemp("qa-index"))},
                     engine={"num_kv_blocks": 128})


def test_qa_runs_every_question_with_and_without_retrieval(qa_run):
    assert list(qa_run.variants) == ["retrieval=on", "retrieval=off"]
    assert "smollm2-135m-instruct" in qa_run.summary["model"]
    assert set(qa_run.summary["quality"]) == {"retrieval=on", "retrieval=off"}
    on, off = (qa_run.variants[n] for n in ("retrieval=on", "retrieval=off"))
    assert on["index"]["chunks"] > 0 and on["index"]["corpus"].startswith("stdlib:module/json")
    assert off["index"] is None
    assert on["classes"]["retrieval"]["tokens"] > 0 and off["classes"]["retrieval"]["tokens"] == 0
    assert on["quality"]["retrieval"] is True and off["quality"]["retrieval"] is False
    assert on["quality"]["facts_in_context_rate"] == 1.0  # both answers are in the retrieved chunks
    records = next(res.records for res in qa_run.results if res.name == "retrieval=on")
    assert on["quality"]["copy_baseline_accuracy"] == sum(r["copy_correct"] for r in records) / len(records)
    assert "copy_baseline_accuracy" not in off["quality"]  # nothing retrieved, nothing to copy


def test_qa_records_are_scored_by_their_facts_as_whole_tokens(qa_run):
    questions = question_by_id()
    for res in qa_run.results:
        assert sorted(r["question_id"] for r in res.records) == sorted(QUESTIONS)
        for r in res.records:
            assert r["ok"] and r["answer"].strip() and r["finish_reason"] in ("done", "max_steps")
            assert r["correct"] == score_answer(r["answer"], questions[r["question_id"]].facts).correct
            assert sum(r["classes"][c]["tokens"] for c in PROMPT_CLASSES) == r["prompt_tokens"]
            assert 0 < sum(r["classes"][c]["tokens"] for c in OUTPUT_CLASSES) == r["output_tokens"] <= 32
        quality = qa_run.variants[res.name]["quality"]
        assert quality["questions"] == len(QUESTIONS)
        assert quality["correct"] == sum(r["correct"] for r in res.records)
        assert qa_run.variants[res.name]["cost"]["token_cost_usd"] > 0
