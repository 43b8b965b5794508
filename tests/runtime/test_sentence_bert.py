"""Loom's Sentence-BERT encoder equals sentence-transformers on the bundled MiniLM, is chosen only for a
plain Sentence-BERT folder, and spares a process the sentence-transformers import."""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from loom.retrieval.embedder import default_model_path
from loom.runtime.models.sentence_bert import SentenceBert, load_sentence_bert, load_sentence_encoder


def _texts() -> list[str]:
    import json as json_module
    import zipfile

    docs = [inspect.getdoc(o) or "" for o in (json_module.dumps, zipfile.ZipFile, zipfile.ZipFile.extractall,
                                               shutil.copytree, inspect.getsource)]
    return docs + ["  How do I extract all members of a zip archive?  ", "x", "", "word " * 400]


def test_vectors_equal_sentence_transformers_on_documentation_text_short_empty_and_truncated_texts():
    from sentence_transformers import SentenceTransformer

    texts = _texts()
    ours = load_sentence_bert(default_model_path())
    assert isinstance(ours, SentenceBert)
    reference = SentenceTransformer(default_model_path(), device="cpu")
    a = ours.encode(texts, batch_size=4)
    b = reference.encode(texts, batch_size=4, convert_to_numpy=True, normalize_embeddings=True)
    assert a.dtype == np.float32 and a.shape == b.shape == (len(texts), 384)
    assert np.abs(a - b).max() < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert ours.max_seq_length == reference.max_seq_length == 256
    assert ours.get_sentence_embedding_dimension() == 384


def test_a_folder_pooling_otherwise_than_by_mean_goes_to_sentence_transformers(tmp_path: Path):
    folder = tmp_path / "cls-pooled"
    shutil.copytree(default_model_path(), folder)
    pooling = folder / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**cfg, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    assert load_sentence_bert(folder) is None
    assert type(load_sentence_encoder(str(folder))).__name__ == "SentenceTransformer"


def test_a_model_configured_to_lower_case_its_input_embeds_as_sentence_transformers_does(tmp_path: Path):
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "lower"
    shutil.copytree(default_model_path(), folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(  # a cased tokenizer: only the setting lower-cases
        {**json.loads((folder / "tokenizer_config.json").read_text()), "do_lower_case": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": True}))
    texts = ["ZipFile.extractall Extracts ALL Members", "zipfile"]
    ours = load_sentence_bert(folder)
    assert ours is not None and ours.lower_case
    b = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    assert np.abs(ours.encode(texts) - b).max() < 1e-5


def test_searching_with_the_bundled_embedder_never_imports_sentence_transformers(tmp_path: Path):
    script = ("import sys; from loom.retrieval import Embedder; Embedder(device='cpu').encode(['zip archive']); "
              "print(sorted(m for m in ('sentence_transformers', 'transformers.modeling_utils') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]", out.stdout


def test_rows_come_back_in_input_order_though_batches_run_longest_first():
    encoder = load_sentence_bert(default_model_path())
    texts = ["zip", "How do I extract all members of a zip archive into a folder?", "tar files", ""]
    together = encoder.encode(texts, batch_size=2)
    alone = np.concatenate([encoder.encode([t]) for t in texts])
    assert together.shape == (4, 384) and np.abs(together - alone).max() < 1e-5
    assert encoder.encode([]).shape == (0, 384)
