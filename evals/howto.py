"""How-to questions through ``loom serve``, over documentation the ``qa`` suite does not index.

The ``qa`` suite asks "Which argument ...?" and "What does ...?" questions; a user of a library's docs
mostly asks "How do I ...?", and a small model answers those with prose and an example of its own,
which is where replies run to ``max_tokens`` and where the answer check (``loom.orchestrator.grounding``)
meets names the example invents.  ``python -m loom.evals.howto [--model M] [--quantization int4]
[--sets structlog] [--system TEXT] [--json PATH]`` asks the questions of ``evals/data/howto.json`` the way
:mod:`loom.evals.serve_qa` asks its own: per set, ``loom ingest`` of the pinned sdist's docs
(:data:`loom.retrieval.corpora.CORPORA`: structlog, marshmallow, attrs, itsdangerous, packaging, flask and
werkzeug, each with its autodoc source), ``loom serve --no-auth --index`` on a free loopback port, and per question
a new session ``POST /v1/sessions {"index": true}`` with the server's defaults (a documentation-QA
session: its system prompt, greedy, 256 answer tokens, ``no_match_answer``), one question at a time.

Each set has answerable questions, each with one fact: the API name a right answer must use, as
whole-token alternatives (``JSONRenderer``; ``load_default`` or ``missing=``), scored as the ``qa``
suite scores facts (:func:`loom.evals.qa.score_answer`), and questions about features the library does
not have, right when answered "not found" (:func:`loom.evals.qa.says_not_found`) or, asked as a yes/no
question ("Does Werkzeug include an ORM ...?"), "no" (:func:`loom.evals.qa.denies`); a yes/no question the
documents answer "yes" has ``Yes`` among its fact's alternatives.  The facts were
written from the libraries' docs by hand; a fact is necessary, not sufficient (an answer naming
``JSONRenderer`` with a wrong call still scores), so read the answers (``--json``) before trusting a
small difference.  Prints, per set and in all: answerable right, "not found", replies cut at
``max_tokens``, looping replies and the mean reply length (:func:`loom.evals.serve_qa.report`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loom.evals.serve_qa import Served, ServedAnswer, ask, ingest_paths, quantization_argument, report
from loom.json_types import JSONObject

DATA = Path(__file__).parent / "data" / "howto.json"


@dataclass(frozen=True)
class HowTo:
    """One question of ``evals/data/howto.json``.

    Attributes:
        id: unique id (``<set>-<words>``).
        qa_set: the set (and :data:`loom.retrieval.corpora.CORPORA` name) it is asked over.
        question: the question as a user types it.
        facts: whole-token alternatives a right answer holds (one tuple per fact); empty: the documents
            do not answer it.
    """

    id: str
    qa_set: str
    question: str
    facts: tuple[tuple[str, ...], ...]
    golds: tuple[tuple[str, str], ...] = ()  # no gold sections: `ask` reports none shown

    @property
    def answerable(self) -> bool:
        return bool(self.facts)


def load(path: Path = DATA) -> dict[str, list[HowTo]]:
    """The questions per set, in file order.

    Raises:
        ValueError: a duplicate id, a question without "?", or a fact without alternatives.
    """
    sets: dict[str, list[HowTo]] = {}
    seen: set[str] = set()
    for name, entry in json.loads(path.read_text()).items():
        for q in entry["questions"]:
            facts = tuple(tuple(alts) for alts in q["facts"] or [])
            if q["id"] in seen or not q["question"].endswith("?") or any(not alts for alts in facts):
                raise ValueError(f"howto: malformed question {q['id']!r}")
            seen.add(q["id"])
            sets.setdefault(name, []).append(HowTo(q["id"], name, q["question"], facts))
    return sets


def ingest(corpus: str, index: Path) -> None:
    """``loom ingest`` the docs of the pinned ``corpus`` into ``index``.

    Raises:
        loom.retrieval.corpora.CorpusError: the sdist could not be had.
        RuntimeError: the command failed (its last output lines).
    """
    from loom.retrieval.corpora import ensure_corpus

    ingest_paths([ensure_corpus(corpus).docs], index)


def run(model: str, sets: Sequence[str], system: str | None = None, workdir: Path | None = None,
        quantization: str = "auto") -> list[ServedAnswer]:
    """Ask every question of ``sets`` through a server over that set's docs, one new session per question,
    one at a time (greedy and unbatched, so a run repeats); ``system``: the sessions' system prompt
    (default: the server's); ``quantization``: the server's weight format (``loom serve --quantization``).

    Raises:
        ValueError: an unknown set.
    """
    questions = load()
    unknown = [s for s in sets if s not in questions]
    if unknown:
        raise ValueError(f"howto sets: unknown {unknown}; known: {', '.join(questions)}")
    session: JSONObject = {"index": True}
    if system is not None:
        session["system_prompt"] = system
    records: list[ServedAnswer] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for name in sets:
            work = Path(tmp) / name
            work.mkdir()
            ingest(name, work / "index")
            with Served(model, work / "index", work, quantization) as server:
                for q in questions[name]:
                    records += ask(server.url, [q], session)
    return records


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    from loom.runtime.checkpoint.registry import default_model

    parser = argparse.ArgumentParser(prog="python -m loom.evals.howto", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="the model (default: Loom's default model)")
    parser.add_argument("--sets", default=",".join(load()), help="comma-separated sets")
    parser.add_argument("--system", default=None, help="the sessions' system prompt (default: the server's)")
    parser.add_argument("--json", default=None, help="write the records and the summary here")
    quantization_argument(parser)
    args = parser.parse_args(argv)
    try:
        records = run(args.model or default_model(), [s for s in args.sets.split(",") if s], args.system,
                      quantization=args.quantization)
    except ValueError as exc:
        parser.error(str(exc))
    report(records, args.json)


if __name__ == "__main__":
    main()
