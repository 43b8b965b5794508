"""``POST /v1/embeddings`` through the official ``openai`` client against ``loom serve``.

The vectors are the server's real MiniLM embedder's (``retrieval.Embedder``,
the one retrieval uses), compared with the same embedder loaded here.
"""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["The cat sat on the mat.", "A kitten was sitting on the rug.", "Quarterly tax filings are due in April."]


@pytest.fixture(scope="module")
def local():  # noqa: ANN201
    from loom.retrieval import Embedder

    return Embedder()


def test_vectors_are_the_retrieval_embedders_own_and_similar_sentences_score_higher(openai_client, local):
    r = openai_client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert r.object == "list" and r.model == MODEL and [d.index for d in r.data] == [0, 1, 2]
    got = np.array([d.embedding for d in r.data], dtype=np.float32)
    assert got.shape == (3, 384)
    np.testing.assert_allclose(got, local.encode(TEXTS), atol=1e-5)
    assert np.linalg.norm(got, axis=1) == pytest.approx([1.0] * 3, abs=1e-5)
    cos = got @ got.T
    assert cos[0, 1] > 0.5 > cos[0, 2]  # cat/kitten vs tax filings
    counts = [len(ids) for ids in local.tokenizer(TEXTS)["input_ids"]]
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(counts)


def test_base64_vectors_decode_to_the_float_ones_both_by_the_client_and_by_hand(openai_client):
    floats = openai_client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    # no encoding_format: the client asks for base64 and decodes it itself
    by_client = openai_client.embeddings.create(model=MODEL, input=TEXTS)
    raw = openai_client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="base64")
    for f, c, b in zip(floats.data, by_client.data, raw.data):
        assert isinstance(b.embedding, str)
        by_hand = np.frombuffer(base64.b64decode(b.embedding), dtype="<f4")
        assert list(by_hand) == pytest.approx(f.embedding, abs=0) and c.embedding == pytest.approx(f.embedding, abs=0)


def test_a_single_string_gives_one_vector_and_its_own_hf_id_names_the_embedder(openai_client):
    r = openai_client.embeddings.create(model=f"sentence-transformers/{MODEL}", input=TEXTS[0],
                                        encoding_format="float", dimensions=384)
    assert len(r.data) == 1 and len(r.data[0].embedding) == 384


def _bad(call, param: str, status: type[openai.APIStatusError] = openai.BadRequestError) -> dict:  # noqa: ANN001
    with pytest.raises(status) as info:
        call()
    assert info.value.body["param"] == param, info.value.body
    return info.value.body


def test_token_ids_other_dimensions_empty_or_overlong_input_are_400_naming_the_field(openai_client):
    def make(**kw):  # noqa: ANN003, ANN202
        return lambda: openai_client.embeddings.create(**{"model": MODEL, "input": TEXTS, **kw})

    assert "text" in _bad(make(input=[[101, 2000, 102]]), "input")["message"]
    assert "384" in _bad(make(dimensions=128), "dimensions")["message"]
    _bad(make(input=[]), "input")
    err = _bad(make(input=["short", "word " * 300]), "input.1")
    assert err["code"] == "context_length_exceeded" and "256" in err["message"]


def test_the_chat_model_is_400_and_an_unknown_model_404_both_naming_model_and_the_embedder(
        openai_client, model_name):
    err = _bad(lambda: openai_client.embeddings.create(model=model_name, input="hi"), "model")
    assert MODEL in err["message"]
    err = _bad(lambda: openai_client.embeddings.create(model="text-embedding-3-small", input="hi"), "model",
               openai.NotFoundError)
    assert MODEL in err["message"]
