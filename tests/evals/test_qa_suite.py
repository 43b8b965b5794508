"""The qa suite: containment scoring, "not found" detection and gold-section keys on hand-made
answers, and a small real run with and without retrieval on the default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest

from loom import evals
from loom.evals.qa import hit_gold_key, qa_quality, question_by_id, says_not_found, score_answer
from loom.evals.records import OUTPUT_CLASSES, PROMPT_CLASSES
from loom.retrieval.types import Hit

QUESTIONS = ["json-sort-keys", "os-path-join-absolute", "stdlib-none-json-depth"]


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


def test_a_fact_the_answer_only_negates_is_not_stated_unless_the_question_asks_in_the_negative():
    # Qwen2.5-Coder-0.5B's answer to qa's ordereddict-move-to-end: it scored for "beginning" before
    q = "Where does OrderedDict.move_to_end move the element when last is false?"
    wrong = "When `last=False`, `OrderedDict.move_to_end` moves the element to the end of the list, not the beginning."
    assert not score_answer(wrong, [["beginning", "front", "start"]], q).correct
    assert score_answer(wrong, [["beginning", "front", "start"]]).correct  # no question: occurrence alone
    assert score_answer("It moves it to the beginning, not the end.", [["beginning"]], q).correct
    assert not score_answer("It isn't at the front.", [["front"]], q).correct
    negative = "In the lazy loading example, cli --help loads foo and bar; which subcommand does it still not load?"
    assert score_answer("The example does not load baz.", [["baz"]], negative).correct


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
    assert q["unanswerable"] == 0 and q["not_found_rate"] is None and q["citation_precision"] is None
    assert qa_quality([])["accuracy"] == 0.0


def test_quality_block_scores_sets_citations_and_not_found_apart():
    gold, other = ["options.md", "Options > Counting"], ["options.md", "Options > Boolean"]
    base = {"ok": True, "output_tokens": 8, "cost": 0.1, "qa_set": "click"}
    recs = [{**base, "answerable": True, "correct": True, "fact_fraction": 1.0, "sources": [gold, other],
             "sources_gold": 1, "not_found": False, "copy_correct": True, "first_sentence": True},
            {**base, "answerable": True, "correct": False, "fact_fraction": 0.0, "sources": [], "sources_gold": 0,
             "not_found": True, "copy_correct": False, "first_sentence": False},
            {**base, "answerable": False, "correct": True, "not_found": True, "copy_not_found": False},
            {**base, "qa_set": "stdlib", "answerable": False, "correct": False, "not_found": False,
             "copy_not_found": False}]
    q = qa_quality(recs)
    assert (q["questions"], q["correct"], q["accuracy"]) == (2, 1, 0.5)
    assert q["citation_precision"] == 0.5 and q["cited_sources"] == 2 and q["answers_with_source"] == 0.5
    assert (q["unanswerable"], q["not_found"], q["not_found_rate"]) == (2, 1, 0.5)
    assert q["false_not_found_rate"] == 0.5
    assert q["copy_baseline_accuracy"] == 0.5 and q["copy_baseline_not_found_rate"] == 0.0
    assert q["token_cost_per_correct_usd"] == pytest.approx(0.2)  # 2 right outcomes for 0.4
    assert (q["later_questions"], q["later_accuracy"], q["later_copy_baseline_accuracy"]) == (1, 0.0, 0.0)
    assert list(q["by_set"]) == ["stdlib", "click"] and q["by_module"] == {}
    assert q["by_set"]["click"]["not_found_rate"] == 1.0 and q["by_set"]["stdlib"]["not_found_rate"] == 0.0
    assert q["by_set"]["stdlib"]["questions"] == 0 and q["by_set"]["stdlib"]["citation_precision"] is None


def test_not_found_is_a_fixed_phrase_about_the_documents_not_any_negation():
    for said in ["Not found.", "The documentation does not mention a max_depth argument.",
                 "This is not documented in the provided context.", "I don\u2019t know.",
                 "I could not find that in the docs.", "There is no information about it in the text."]:
        assert says_not_found(said), said
    for said in ["It raises KeyError when the key is not found.", "json.dumps has no such argument.",
                 "RuntimeError is raised when a function is unable to find the package.",
                 "The list does not contain duplicates.", "Use sort_keys=True."]:
        assert not says_not_found(said), said


def test_a_no_to_a_yes_no_question_denies_it_and_other_negations_do_not():
    from loom.evals.qa import denies

    q = "Does Werkzeug include an ORM for talking to databases?"
    assert denies(q, "No, Werkzeug does not include an ORM for talking to databases.") and denies("Can it? ", "No.")
    assert not denies(q, "Yes, Werkzeug does include an ORM for talking to databases.")
    assert not denies(q, "Nothing in Werkzeug talks to databases.")  # "no" as a whole first word only
    assert not denies("How do I make Werkzeug compress responses with Brotli?", "No, it cannot.")


def test_gold_keys_of_hits_are_paths_under_the_docs_root_and_object_names(tmp_path):
    page = Hit("c1", "text", 1.0, str(tmp_path / "docs" / "api.rst"), "API > Loaders", "API",
               {"object": "jinja2.FileSystemLoader"})
    guide = Hit("c2", "text", 1.0, str(tmp_path / "docs" / "sub" / "options.md"), "Options > Counting")
    mod = Hit("c3", "text", 1.0, "stdlib:module/json", "json.dumps", "json", {"object": "json.dumps"})
    assert hit_gold_key(page, tmp_path / "docs") == ("api.rst", "jinja2.FileSystemLoader")
    assert hit_gold_key(guide, tmp_path / "docs") == ("sub/options.md", "Options > Counting")
    assert hit_gold_key(mod, None) == ("module/json", "json.dumps") == question_by_id()["json-sort-keys"].gold


def test_a_cited_also_gold_section_counts_as_gold_and_as_the_gold_section_shown(real_model):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from loom.evals.targets.agent import QATarget

    q = question_by_id()["uuid-random"]
    assert q.gold == ("module/uuid", "uuid") and ("module/uuid", "uuid.uuid4") in q.also_gold
    target = QATarget(SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(real_model))))
    uuid4 = Hit("c1", "uuid.uuid4()\n\nGenerate a random UUID.", 1.0, "stdlib:module/uuid", "uuid.uuid4", "uuid",
                {"object": "uuid.uuid4"})
    uuid1 = Hit("c2", "uuid.uuid1(node=None, clock_seq=None)\n\nGenerate a UUID from a host ID and the time.", 0.9,
                "stdlib:module/uuid", "uuid.uuid1", "uuid", {"object": "uuid.uuid1"})

    def grounding(answer: str, hits: list[Hit]) -> dict:
        return target._grounding(q, SimpleNamespace(text=answer), SimpleNamespace(retrieved=hits), 32)

    right = grounding("The uuid4 function generates a random UUID.", [uuid4, uuid1])
    assert right["sources"] == [["module/uuid", "uuid.uuid4"]] and right["sources_gold"] == 1
    assert right["section_retrieved"] is True
    other = grounding("uuid1 generates a UUID from a host ID and the time.", [uuid1])
    assert other["sources"] == [["module/uuid", "uuid.uuid1"]] and other["sources_gold"] == 0
    assert other["section_retrieved"] is False


def test_workload_is_every_question_by_default_or_a_seeded_sample_or_named_ids():
    from loom.evals.qa import QA_SETS, load_questions
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
    click = build("qa", None, options={"sets": "click"}).conversations
    assert [c.id for c in click] == [q.id for q in load_questions("click")]
    assert {c.system for c in click} == {QA_SETS["click"].system_prompt} != {QA_SETS["stdlib"].system_prompt}
    with pytest.raises(ValueError, match="unknown"):
        build("qa", None, options={"sets": "stdlib,nope"})
    assert build("qa", None, options={"retrieval": "on"}).variants == [{"retrieval": "on"}]


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
    assert list(on["index"]) == ["stdlib"]  # one index per question set the run touches
    assert on["index"]["stdlib"]["chunks"] > 0 and on["index"]["stdlib"]["corpus"].startswith("stdlib:module/json")
    assert off["index"] is None
    assert on["classes"]["retrieval"]["tokens"] > 0 and off["classes"]["retrieval"]["tokens"] == 0
    assert on["quality"]["retrieval"] is True and off["quality"]["retrieval"] is False
    assert on["quality"]["facts_in_context_rate"] == 1.0  # both answers are in the retrieved chunks
    records = next(res.records for res in qa_run.results if res.name == "retrieval=on")
    answerable = [r for r in records if r["answerable"]]
    assert on["quality"]["copy_baseline_accuracy"] == sum(r["copy_correct"] for r in answerable) / 2
    assert "copy_baseline_accuracy" not in off["quality"]  # nothing retrieved, nothing to copy
    assert (on["quality"]["questions"], on["quality"]["unanswerable"]) == (2, 1)
    sources = [s for r in answerable for s in r["sources"]]
    gold = sum(r["sources_gold"] for r in answerable)
    assert on["quality"]["citation_precision"] == (gold / len(sources) if sources else None)
    assert off["quality"]["citation_precision"] is None and off["quality"]["not_found_rate"] is not None


def test_qa_records_are_scored_by_their_facts_as_whole_tokens(qa_run):
    questions = question_by_id()
    for res in qa_run.results:
        assert sorted(r["question_id"] for r in res.records) == sorted(QUESTIONS)
        for r in res.records:
            assert r["ok"] and r["answer"].strip() and r["finish_reason"] in ("done", "max_steps")
            q = questions[r["question_id"]]
            assert r["not_found"] == says_not_found(r["answer"]) and r["answerable"] == q.answerable
            assert r["correct"] == (score_answer(r["answer"], q.facts).correct if q.answerable else r["not_found"])
            assert sum(r["classes"][c]["tokens"] for c in PROMPT_CLASSES) == r["prompt_tokens"]
            # a question naming a term the index never uses is answered "not found" with no model call
            model_called = not r.get("unknown_terms")
            # 32 tokens a call: a second call when the answer from the top hit was rejected (``widened``)
            output = sum(r["classes"][c]["tokens"] for c in OUTPUT_CLASSES)
            assert output == r["output_tokens"] <= 32 * (1 + r.get("widened", False))
            assert (r["output_tokens"] > 0) == model_called
        quality = qa_run.variants[res.name]["quality"]
        assert quality["questions"] + quality["unanswerable"] == len(QUESTIONS)
        assert quality["correct"] == sum(r["correct"] for r in res.records if r["answerable"])
        assert qa_run.variants[res.name]["cost"]["token_cost_usd"] > 0


def test_quality_block_counts_off_topic_questions_apart_from_the_rest():
    base = {"ok": True, "output_tokens": 8, "cost": 0.1, "qa_set": "click", "answerable": True}
    recs = [{**base, "correct": True, "fact_fraction": 1.0, "not_found": False},
            {**base, "qa_set": "jinja", "offtopic": True, "correct": True, "not_found": True, "retrieved_sections": 0},
            {**base, "qa_set": "jinja", "offtopic": True, "correct": False, "not_found": False, "retrieved_sections": 2}]
    q = qa_quality(recs)
    assert (q["questions"], q["correct"], q["unanswerable"]) == (1, 1, 0)  # off-topic ones are neither
    assert (q["offtopic"], q["offtopic_not_found"], q["offtopic_not_found_rate"]) == (2, 1, 0.5)
    assert q["offtopic_shown_documents_rate"] == 0.5
    assert q["token_cost_per_correct_usd"] == pytest.approx(0.15)  # 2 right outcomes for 0.3


def test_an_off_topic_question_finds_nothing_related_and_is_answered_not_found(tmp_path_factory):
    """``index=stdlib``: Click's questions search the stdlib index, where nothing is about them."""
    run = evals.run("qa", out=tmp_path_factory.mktemp("qa-offtopic"), warmup=0, report=False,
                    options={"questions": "json-sort-keys,click-eager-expose-value", "output_tokens": 32,
                             "corpus": "stdlib:module/json", "index": "stdlib", "retrieval": "on",
                             "index_dir": str(tmp_path_factory.mktemp("qa-offtopic-index"))},
                    engine={"num_kv_blocks": 128})
    records = {r["question_id"]: r for r in run.results[0].records}
    off = records["click-eager-expose-value"]
    assert off["offtopic"] and off["retrieved_sections"] == 0
    assert off["steps"] == 0 and off["output_tokens"] == 0 and off["prompt_tokens"] == 0  # no model call
    assert off["not_found"] and off["correct"]
    assert not records["json-sort-keys"].get("offtopic") and records["json-sort-keys"]["output_tokens"] > 0
    quality = run.summary["quality"]["retrieval=on"]
    assert (quality["offtopic"], quality["offtopic_not_found_rate"], quality["questions"]) == (1, 1.0, 1)


def test_a_verifier_variant_judges_each_answer_the_lexical_check_let_through(real_model, tmp_path_factory):
    """``verifier=MODEL``: the agent's ``AnswerVerifier`` on an engine of its own; each judged answer's margin is in
    its record (the small model judging itself: its verdicts are noise, the plumbing is real)."""
    run = evals.run("qa", out=tmp_path_factory.mktemp("qa-verifier"), warmup=0, report=False,
                    compare=[f"retrieval=on,verifier={real_model}"],
                    options={"questions": "json-sort-keys,stdlib-none-json-depth", "output_tokens": 32,
                             "corpus": "stdlib:module/json", "retrieval": "on",
                             "index_dir": str(tmp_path_factory.mktemp("qa-verifier-index"))},
                    engine={"num_kv_blocks": 128})
    assert [res.name for res in run.results][0] == "retrieval=on"  # the base variant, then the verifier's
    records = {r["question_id"]: r for res in run.results if "verifier" in res.name for r in res.records}
    assert set(records) == {"json-sort-keys", "stdlib-none-json-depth"}
    assert any(r["verifier_margins"] for r in records.values())  # the verifier judged at least one answer
    for r in records.values():
        margins = r["verifier_margins"]
        assert all(isinstance(m, float) for m in margins) and len(margins) <= 1 + r["widened"]
        if margins and margins[-1] < 0:  # the last answer judged unstated: the turn says "not found"
            assert r["not_found"]
        if r["rejected"] == [] and not r["not_found"]:  # the answer stood: the verifier judged it
            assert len(margins) == 1 and margins[0] >= 0
