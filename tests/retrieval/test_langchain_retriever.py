"""``LoomRetriever`` under LangChain: documents with Loom's metadata, sync = async, ``k``
per field and per call, and LangChain's own LCEL RAG chain (from its RAG tutorial) run
over a real index (MiniLM + FAISS) with ``LoomChatModel`` on the real default model."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from loom.retrieval import Retriever
from loom.retrieval.langchain import LoomRetriever
from tests.retrieval.helpers import index_of

DOCS = {
    "lighthouse.md": "# Lighthouse\n\n## Keeper\n\nThe lighthouse keeper on Gull Island is Marta Vell. "
                     "She has kept the light burning since 1987.\n\n## Lamp\n\nThe lamp is a Fresnel "
                     "lens of the second order, visible for twenty nautical miles.",
    "bakery.md": "# Bakery\n\n## Hours\n\nThe harbour bakery opens at six in the morning and sells rye "
                 "bread and cinnamon buns until noon.",
    "ferry.md": "# Ferry\n\n## Timetable\n\nThe ferry to Gull Island leaves the mainland pier at 9:15 "
                "and returns at 16:40 every day except Sunday.",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder) -> Retriever:
    return index_of(tmp_path_factory, DOCS, embedder, "lc-docs")


def test_documents_carry_chunk_text_and_loom_metadata(index: Retriever) -> None:
    docs = LoomRetriever(retriever=index, k=2).invoke("Who keeps the lighthouse on Gull Island?")
    hits = index.search("Who keeps the lighthouse on Gull Island?", k=2)
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    assert [d.page_content for d in docs] == [h.text for h in hits]
    top = docs[0]
    assert "Marta Vell" in top.page_content and top.id == hits[0].chunk_id
    assert top.metadata["source"].endswith("lighthouse.md")
    assert (top.metadata["title"], top.metadata["section"]) == ("Lighthouse", "Lighthouse > Keeper")
    assert top.metadata["score"] == hits[0].score and top.metadata["chunk_id"] == hits[0].chunk_id


async def test_async_retrieval_returns_the_same_documents_as_sync(index: Retriever) -> None:
    r = LoomRetriever(retriever=index, k=3)
    assert await r.ainvoke("ferry timetable") == r.invoke("ferry timetable")


def test_k_mode_and_filters_apply_per_field_and_per_call(index: Retriever) -> None:
    r = LoomRetriever(retriever=index, k=1)
    assert len(r.invoke("island")) == 1
    assert len(r.invoke("island", k=3)) == 3
    bread = r.invoke("bread", mode="bm25", k=4)
    assert [d.metadata["title"] for d in bread] == ["Bakery"]  # BM25 finds the one chunk with the word
    only_ferry = r.invoke("lighthouse keeper", k=4, filters={"title": "Ferry"})
    assert [d.metadata["title"] for d in only_ferry] == ["Ferry"]


def test_bad_k_is_a_value_error_naming_k(index: Retriever) -> None:
    with pytest.raises(ValueError, match="^k:"):
        LoomRetriever(retriever=index, k=0).invoke("island")


class _Prompts(BaseCallbackHandler):
    """Records the messages every chat model call was sent (LangChain's callback hook)."""

    def __init__(self) -> None:
        self.calls: list[list] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:  # noqa: ANN001
        self.calls.extend(messages)


@pytest.fixture(scope="module")
def chat_model(real_model: Path):
    from loom.orchestrator.langchain import LoomChatModel
    from loom.runtime import LLM

    return LoomChatModel(llm=LLM(str(real_model), max_model_len=2048), max_tokens=24)


def test_langchain_lcel_rag_chain_runs_over_the_loom_index(index: Retriever, chat_model) -> None:
    # LangChain's RAG example, as its docs write it
    retriever = LoomRetriever(retriever=index, k=2)
    template = """Answer the question based only on the following context:
{context}

Question: {question}
"""
    prompt = ChatPromptTemplate.from_template(template)

    def format_docs(docs):  # noqa: ANN001, ANN202
        return "\n\n".join(doc.page_content for doc in docs)

    rag_chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | chat_model
        | StrOutputParser()
    )
    seen = _Prompts()
    answer = rag_chain.invoke("Who is the lighthouse keeper on Gull Island?", config={"callbacks": [seen]})
    assert isinstance(answer, str) and answer.strip()
    (messages,) = seen.calls
    sent = messages[0].content
    assert "Marta Vell" in sent and "Question: Who is the lighthouse keeper on Gull Island?" in sent
    # the retrieved chunks reached the model in the retriever's order
    top2 = [h.text for h in index.search("Who is the lighthouse keeper on Gull Island?", k=2)]
    assert "\n\n".join(top2) in sent
