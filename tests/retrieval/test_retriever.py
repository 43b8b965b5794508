"""Retriever end to end: real MiniLM, real FAISS, real SQLite index folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.retrieval import Document, Retriever, Section
from loom.runtime.errors import NotFoundError


def _open(path: Path, embedder, **kw) -> Retriever:
    return Retriever.open(path, embedder=embedder, **kw)


@pytest.fixture()
def index(tmp_path: Path, corpus: Path, embedder) -> Retriever:
    r = _open(tmp_path / "idx", embedder)
    r.ingest([corpus], show_progress=False)
    return r


def test_ingest_then_search_finds_the_right_section(index: Retriever) -> None:
    hits = index.search("run awaitables concurrently", k=2)
    assert hits[0].section == "Asyncio guide > Gathering"
    assert hits[0].title == "Asyncio guide"
    assert hits[0].document.endswith("asyncio.md")
    assert index.stats()["chunks"] == 6 and index.stats()["index"] == "flat"


def test_reingesting_the_same_files_adds_nothing(index: Retriever, corpus: Path) -> None:
    before = sorted(h.chunk_id for h in index.search("water", k=10, mode="bm25"))
    stats = index.ingest([corpus], show_progress=False)
    assert (stats.documents, stats.documents_unchanged, stats.chunks_added) == (4, 4, 0)
    assert len(index) == 6 and index.vector_index.ntotal == 6
    assert sorted(h.chunk_id for h in index.search("water", k=10, mode="bm25")) == before


def test_changed_document_replaces_only_its_changed_chunks(index: Retriever, corpus: Path) -> None:
    md = corpus / "asyncio.md"
    md.write_text(md.read_text().replace("number of seconds", "number of minutes"))
    stats = index.ingest([corpus], show_progress=False)
    assert (stats.documents_changed, stats.chunks_added, stats.chunks_removed) == (1, 1, 1)
    assert len(index) == 6 and index.vector_index.ntotal == 6
    assert "minutes" in index.search("suspend the current task", k=1)[0].text


def test_index_reloads_lazily_with_identical_results(index: Retriever, embedder) -> None:
    want = index.search("sourdough starter", k=3)
    again = _open(index.index_dir, embedder)
    assert again._index is None and again._bm25 is None
    assert again.search("sourdough starter", k=3) == want
    assert again.settings == {"model": "all-MiniLM-L6-v2", "chunk_tokens": 192, "overlap_tokens": 32,
                              "tokenizer": None}


def test_delete_document_removes_its_chunks_from_flat_index(index: Retriever, corpus: Path) -> None:
    doc = str((corpus / "paths.rst").resolve())
    assert index.delete_document(doc) == 2
    assert len(index) == 4 and index.vector_index.ntotal == 4
    assert all(h.document != doc for h in index.search("os.path.join", k=10))
    assert doc not in index.documents()
    with pytest.raises(NotFoundError):
        index.delete_document(doc)


def test_hnsw_above_threshold_tombstones_deletes_then_compacts(tmp_path: Path, corpus: Path,
                                                             embedder) -> None:
    r = _open(tmp_path / "h", embedder, hnsw_threshold=4, rebuild_ratio=0.5)
    r.ingest([corpus], show_progress=False)
    assert r.vector_index.kind == "hnsw" and r.vector_index.ntotal == 6
    paths = str((corpus / "paths.rst").resolve())
    r.delete_document(paths)  # 2 of 6 tombstoned: below the 0.5 ratio
    assert r.tombstones and r.vector_index.ntotal == 6 and len(r) == 4
    for mode in ("dense", "bm25", "hybrid"):
        assert all(h.document != paths for h in r.search("os.path.join", k=10, mode=mode))
    reopened = _open(r.index_dir, embedder, hnsw_threshold=4, rebuild_ratio=0.5)
    assert reopened.tombstones == r.tombstones
    reopened.delete_document(str((corpus / "asyncio.md").resolve()))  # 4 of 6: compact
    assert reopened.tombstones == set() and reopened.vector_index.ntotal == 2
    assert reopened.vector_index.kind == "flat"  # 2 vectors is below the threshold


def test_reingesting_a_tombstoned_document_revives_it_without_duplicates(
        tmp_path: Path, corpus: Path, embedder) -> None:
    r = _open(tmp_path / "h", embedder, hnsw_threshold=4)
    r.ingest([corpus], show_progress=False)
    r.delete_document(str((corpus / "notes.txt").resolve()))
    r.ingest([corpus], show_progress=False)
    assert not r.tombstones and r.vector_index.ntotal == 6 and len(r) == 6
    assert r.search("tomatoes full sun", k=1)[0].title == "Garden notes"


def test_filters_on_document_section_and_metadata(index: Retriever, corpus: Path) -> None:
    doc = str((corpus / "asyncio.md").resolve())
    hits = index.search("path", k=10, filters={"document": doc})
    assert hits and {h.document for h in hits} == {doc}
    hits = index.search("path", k=10, filters={"section": "Path handling > Splitting"})
    assert [h.section for h in hits] == ["Path handling > Splitting"]
    hits = index.search("bread", k=10, filters={"format": ["html", "txt"]})
    assert {h.metadata["format"] for h in hits} == {"html", "txt"}
    assert index.search("bread", k=10, filters={"format": "pdf"}) == []


def test_ties_are_ordered_by_chunk_id_in_every_mode(tmp_path: Path, embedder) -> None:
    r = _open(tmp_path / "t", embedder)
    same = (Section("", "The quick brown fox jumps over the lazy dog."),)
    r.add_documents([Document(f"doc{i}", "Fox", same) for i in range(4)], show_progress=False)
    for mode in ("dense", "bm25", "hybrid"):
        hits = r.search("quick brown fox", k=4, mode=mode)
        assert [h.chunk_id for h in hits] == sorted(h.chunk_id for h in hits)
        if mode != "hybrid":  # RRF turns equal scores into consecutive ranks
            assert len({h.score for h in hits}) == 1
        assert r.search("quick brown fox", k=4, mode=mode) == hits


def test_hybrid_beats_or_equals_dense_on_identifier_queries(tmp_path: Path, embedder) -> None:
    r = _open(tmp_path / "os", embedder)
    r.ingest(["stdlib:module/os.path"], show_progress=False)
    names = ["os.path.join", "os.path.splitext", "os.path.realpath", "os.path.commonpath",
             "os.path.getmtime", "os.path.expandvars", "os.path.isabs", "os.path.relpath"]

    def mrr(mode: str) -> float:
        total = 0.0
        for name in names:
            sections = [h.section for h in r.search(name, k=10, mode=mode)]
            total += 1 / (sections.index(name) + 1) if name in sections else 0.0
        return total / len(names)

    dense, hybrid = mrr("dense"), mrr("hybrid")
    assert hybrid >= dense
    assert hybrid >= 0.9


def test_bad_search_arguments_raise_value_error_naming_the_field(index: Retriever) -> None:
    for kwargs, field in (({"query": ""}, "query"), ({"query": "x", "k": 0}, "k"),
                          ({"query": "x", "mode": "fuzzy"}, "mode"),
                          ({"query": "x", "query_vector": [0.0] * 3}, "query_vector")):
        with pytest.raises(ValueError, match=field):
            index.search(**kwargs)


def test_given_query_vector_gives_the_same_hits(index: Retriever, embedder) -> None:
    q = "sourdough starter"
    assert index.search(q, k=3, query_vector=embedder.encode([q])[0]) == index.search(q, k=3)


def test_index_settings_are_fixed_at_creation(index: Retriever, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_tokens"):
        Retriever.open(index.index_dir, chunk_tokens=64)
    with pytest.raises(ValueError, match="embedder"):
        Retriever.open(index.index_dir, embedder="some/other-model")
    with pytest.raises(NotFoundError):
        Retriever.open(tmp_path / "missing", create=False)


def test_missing_path_ingests_nothing(index: Retriever, corpus: Path) -> None:
    with pytest.raises(FileNotFoundError):
        index.ingest([corpus / "notes.txt", corpus / "nope.md"], show_progress=False)
    assert len(index) == 6


def test_reopen_repairs_a_crash_between_faiss_write_and_sqlite_commit(index: Retriever,
                                                                       embedder) -> None:
    import sqlite3

    import numpy as np

    from loom.retrieval.index import VectorIndex

    path = index.index_dir / "vectors.faiss"
    # 1) vectors written, rows never committed: an orphan vector appears in FAISS.
    vi = VectorIndex.load(path)
    vi.add(np.array([12345], np.int64), embedder.encode(["orphan"]))
    vi.save(path)
    # 2) rows committed, vectors lost: drop one chunk's vector from the file.
    con = sqlite3.connect(index.index_dir / "chunks.sqlite")
    (lost,) = con.execute("SELECT faiss_id FROM chunks ORDER BY faiss_id LIMIT 1").fetchone()
    con.close()
    vi.remove(np.array([lost], np.int64))
    vi.save(path)

    again = _open(index.index_dir, embedder)
    ids = set(again.vector_index.ids().tolist())
    assert 12345 not in ids and lost in ids and again.vector_index.ntotal == 6
    assert set(VectorIndex.load(path).ids().tolist()) == ids  # repaired on disk too


def test_searches_run_while_another_thread_ingests(tmp_path: Path, corpus: Path,
                                                   embedder) -> None:
    import threading

    r = _open(tmp_path / "c", embedder)
    r.ingest([corpus / "notes.txt"], show_progress=False)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            r.ingest([corpus], show_progress=False)
        except BaseException as exc:  # noqa: BLE001 - re-raised below via the assert
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    seen = []
    while t.is_alive():
        seen.append([h.title for h in r.search("tomatoes full sun", k=1)])
    t.join()
    assert not errors
    assert seen and all(titles == ["Garden notes"] for titles in seen)
    assert len(r) == 6 and r.vector_index.ntotal == 6


def test_a_file_that_fails_to_load_is_reported_and_skipped(index: Retriever, corpus: Path) -> None:
    bad = corpus / "broken.md"
    bad.write_bytes(b"# Broken\n\n\xff\xfe not utf-8")
    stats = index.ingest([corpus], show_progress=False)
    assert [p for p, _ in stats.failures] == [str(bad.resolve())]
    assert "1 files skipped" in stats.summary()
    assert str(bad.resolve()) not in index.documents() and len(index.documents()) == 4


def test_chunks_fit_the_serving_models_tokens_too(tmp_path: Path, embedder, real_model) -> None:
    from transformers import AutoTokenizer

    from loom.retrieval.chunking import Chunker
    from loom.retrieval.types import Document, Section

    model_tok = AutoTokenizer.from_pretrained(str(real_model))
    # identifiers with digits: one MiniLM word piece each, several BPE tokens each in SmolLM2
    text = " ".join(f"x{i}q{i * 7}z{i * 13}" for i in range(400))
    doc = Document("code", "Code", (Section("", text),))
    plain = Chunker(embedder.tokenizer, 64, 8).chunk(doc)
    both = Chunker(embedder.tokenizer, 64, 8, model_tokenizer=model_tok).chunk(doc)
    count = lambda t: len(model_tok(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert max(count(c.text) for c in plain) > 64  # the embedder's count alone overflows the model's
    assert all(count(c.text) <= 64 and c.num_tokens <= 64 for c in both)
    assert all(c.metadata["model_tokens"] == count(c.text) for c in both)
    assert " ".join(c.text for c in both).count("x399q") >= 1  # nothing lost at the end


def test_kept_chunks_follow_their_documents_metadata_and_positions(index: Retriever, corpus: Path) -> None:
    from loom.retrieval.types import Document, Section

    doc = Document("api", "API", (Section("S", "Alpha entry text."), Section("T", "Beta entry text.")))
    index.add_documents([doc], show_progress=False)
    moved = Document("api", "API", (Section("R", "New first entry."), Section("S", "Alpha entry text.",
                                                                                {"object": "pkg.alpha"}),
                                    Section("T", "Beta entry text.")))
    index.add_documents([moved], show_progress=False)
    hit = index.search("Alpha entry", k=1, filters={"document": "api"})[0]
    row = index.store.rows_by_faiss_ids([int(hit.chunk_id, 16)])[int(hit.chunk_id, 16)]
    assert hit.metadata["object"] == "pkg.alpha" and row.position == 1


def test_stdlib_signatures_carry_no_memory_addresses() -> None:
    from loom.retrieval.stdlib import module_document

    doc = module_document(__import__("dataclasses"))
    assert not any(" at 0x" in s.text for s in doc.sections)
