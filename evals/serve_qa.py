"""Documentation QA through ``loom serve``, as a user of the server asks it.

``python -m loom.evals.serve_qa [--model M] [--quantization F] [--qa-sets click] [--num-questions N]`` takes the
``qa`` suite's questions (:mod:`loom.evals.qa`) and, for each set, does what a user of the server
does, each step a real command or request:

1. ``loom ingest <the set's docs> --index DIR`` (the same sdist docs and stdlib pages the ``qa``
   suite indexes);
2. ``loom serve --no-auth --index DIR --model M`` on a free loopback port;
3. per question, a new session ``POST /v1/sessions {"index": true}`` with the server's defaults
   (a documentation-QA session's system prompt unless ``--system``, ``--system ""`` for none; greedy;
   256 answer tokens) and one
   ``POST /v1/sessions/{id}/messages``.  Such a session (an index, no tools, no memory) is a
   documentation-QA session by the server's default; ``--no-match-answer TEXT`` sets its text and
   ``--always-answer`` turns it off (``no_match_answer``: the answer when nothing retrieved is related or the model's
   answer is ungrounded).  ``--questions-per-session K`` asks K consecutive questions in one session
   instead, one after another, as a user asking on does; the summary then splits accuracy by the
   question's place (a session's first turn, its later turns).  ``--sampling JSON`` sets the
   sessions' ``sampling`` (e.g. ``'{"repetition_penalty": 1.1}'``; default: the server's), and
   ``--max-history-tokens N`` their ``max_history_tokens``.

Each answer is scored as the ``qa`` suite scores it: right when it holds every fact
(:func:`loom.evals.qa.score_answer`), and for an unanswerable question when it says the documents
do not hold the answer (:func:`loom.evals.qa.says_not_found`) or, to a yes/no question, says no
(:func:`loom.evals.qa.denies`).  Prints accuracy, "not found",
the share of turns shown a gold section, of replies cut at ``max_tokens``, of replies that loop
(:func:`loom.evals.qa.repeats`) and the mean answer length, per set; ``--json PATH`` writes every
record, with the turn's ``retrieval.unsupported`` (why the model's answer was replaced by "not found") and
``no_match`` (the search found nothing related), so a wrong "not found" reads as a refused answer or a missed
search.  The in-process ``qa`` suite (``loom eval run --suite qa``) asks the same questions of an
``Agent`` directly with its own system prompt and 64 answer tokens; this one measures what the REST
path and its defaults give.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loom.evals.subprocess_server import terminate, wait_until_healthy
from loom.json_types import JSONObject


@dataclass
class ServedAnswer:
    """One question asked through a session of ``loom serve``, and how its answer scored."""

    id: str
    qa_set: str
    question: str
    answerable: bool
    answer: str
    state: str
    finish_reason: str | None
    sources: list[str]
    gold_shown: bool | None  # None: the question names no gold section (loom.evals.howto's)
    correct: bool
    not_found: bool
    completion_tokens: int
    repeats: bool = False  # the reply loops (loom.evals.qa.repeats)
    turn: int = 1  # the question's place in its session (1: a fresh session)
    # why the model's answer was replaced by "not found" (the turn's retrieval.unsupported: its claims no shown
    # section holds, "(restates the question)", ...) and whether the search found nothing related (no_match)
    unsupported: list[str] = field(default_factory=list)
    no_match: bool = False


def is_right(question: Any, answer: str) -> bool:
    """Whether ``answer`` is right: an answerable question's facts are in it (:func:`loom.evals.qa.score_answer`);
    an unanswerable one is answered "not found" (:func:`loom.evals.qa.says_not_found`) or, asked as a yes/no
    question, "no" (:func:`loom.evals.qa.denies`)."""
    from loom.evals.qa import denies, says_not_found, score_answer

    if question.answerable:
        return score_answer(answer, question.facts, question.question).correct
    return says_not_found(answer) or denies(question.question, answer)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loom(*args: str) -> list[str]:
    return [sys.executable, "-m", "loom.cli", *args]


def ingest(qa_set: str, index: Path) -> None:
    """``loom ingest`` the docs of ``qa_set`` into ``index`` (the ``qa`` suite's corpus of that set).

    Raises:
        RuntimeError: the command failed (its last output lines).
    """
    from loom.evals.qa import corpus_for, load_set

    ingest_paths(corpus_for(load_set(qa_set), qa_set).split(","), index)


def ingest_paths(paths: Sequence[str | Path], index: Path) -> None:
    """``loom ingest PATH... --index index``, as a user runs it.

    Raises:
        RuntimeError: the command failed (its last output lines).
    """
    proc = subprocess.run(_loom("ingest", *map(str, paths), "--index", str(index), "--no-progress"),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"loom ingest failed: {(proc.stderr or proc.stdout)[-1500:]}")


class Served:
    """A ``loom serve --no-auth --index`` process on a free loopback port (a context manager); ``quantization``:
    its ``--quantization`` (``"auto"``: the registered model's own format)."""

    def __init__(self, model: str, index: Path, workdir: Path, quantization: str = "auto") -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = _loom("serve", "--no-auth", "--host", "127.0.0.1", "--port", str(self.port), "--model", model,
                         "--index", str(index), "--db", f"sqlite:///{workdir / 'serve-qa.db'}",
                         "--quantization", quantization)
        self.log = workdir / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Served:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        if wait_until_healthy(self.proc, self.url + "/health", timeout_s=600, poll_s=1):
            return self
        self.__exit__()
        raise RuntimeError(f"loom serve did not start: {self.log.read_text()[-1500:]}")

    def __exit__(self, *exc: object) -> None:
        terminate(self.proc)


def ask(url: str, questions: Sequence[Any], session: JSONObject) -> list[ServedAnswer]:
    """One new session with ``session`` as its config; each question a message of it, in order, each
    answer scored."""
    import httpx

    from loom.evals.qa import repeats, says_not_found

    records = []
    with httpx.Client(base_url=url, timeout=600) as client:
        r = client.post("/v1/sessions", json=session)
        r.raise_for_status()
        sid = r.json()["id"]
        for turn_index, question in enumerate(questions, 1):
            turn = client.post(f"/v1/sessions/{sid}/messages", json={"content": question.question})
            turn.raise_for_status()
            out = turn.json()
            answer = out.get("answer") or ""
            retrieval = out.get("retrieval") or {}
            sources = list(retrieval.get("sources") or [])
            records.append(ServedAnswer(
                id=question.id, qa_set=question.qa_set, question=question.question,
                answerable=question.answerable, answer=answer, state=out["state"],
                finish_reason=out.get("finish_reason"), sources=sources,
                gold_shown=gold_shown(question.golds, sources),
                correct=is_right(question, answer),
                not_found=says_not_found(answer), completion_tokens=int((out.get("usage") or {}).get(
                    "completion_tokens", 0)), turn=turn_index, repeats=repeats(answer),
                unsupported=list(retrieval.get("unsupported") or []), no_match=bool(retrieval.get("no_match"))))
    return records


def run(model: str, qa_sets: Sequence[str], num_questions: int | None = None, seed: int = 0,
        system: str | None = None, no_match_answer: str | None = None, concurrency: int = 4,
        workdir: Path | None = None, questions_per_session: int = 1,
        sampling: JSONObject | None = None, max_history_tokens: int | None = None,
        always_answer: bool = False, quantization: str = "auto") -> list[ServedAnswer]:
    """Ask each set's questions (a seeded sample of ``num_questions`` per set, or all) through a server
    serving that set's docs, ``questions_per_session`` consecutive questions in one session (one after
    another, as a user asking on); ``sampling``: the sessions' ``sampling`` fields (default: the
    server's); ``max_history_tokens``: the sessions' history cap (default: none); ``quantization``: the
    server's weight format (``loom serve --quantization``); returns the records in question order."""
    if questions_per_session < 1:
        raise ValueError(f"questions_per_session must be at least 1, got {questions_per_session}")
    from loom.evals.qa import load_set

    session: JSONObject = {"index": True}
    if system is not None:
        session["system_prompt"] = system
    if no_match_answer is not None or always_answer:
        session["no_match_answer"] = None if always_answer else no_match_answer
    if sampling:
        session["sampling"] = dict(sampling)
    if max_history_tokens is not None:
        session["max_history_tokens"] = max_history_tokens
    records: list[ServedAnswer] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for qa_set in qa_sets:
            questions = list(load_set(qa_set))
            if num_questions is not None and num_questions < len(questions):
                questions = random.Random(seed).sample(questions, num_questions)
            work = Path(tmp) / qa_set
            work.mkdir()
            ingest(qa_set, work / "index")
            with Served(model, work / "index", work, quantization) as server, ThreadPoolExecutor(concurrency) as pool:
                groups = [questions[i:i + questions_per_session]
                          for i in range(0, len(questions), questions_per_session)]
                for answers in pool.map(lambda g: ask(server.url, g, session), groups):
                    records += answers
    return records


def summary(records: Sequence[ServedAnswer]) -> JSONObject:
    """Per set and in all: accuracy (answerable), not found (unanswerable answered right: "not found", or "no" to a
    yes/no question), gold shown, cut replies, mean tokens."""
    def block(rs: list[ServedAnswer]) -> JSONObject:
        ans, una = [r for r in rs if r.answerable], [r for r in rs if not r.answerable]
        return {"questions": len(rs), "answerable": len(ans),
                "accuracy": _accuracy(ans),
                "unanswerable": len(una), "not_found": _accuracy(una),
                "false_not_found": sum(r.not_found for r in ans) / len(ans) if ans else None,
                "gold_shown": _share([r.gold_shown for r in ans if r.gold_shown is not None]),
                "cut_at_max_tokens": sum(r.finish_reason == "length" for r in rs) / len(rs) if rs else None,
                "repeats": _share([r.repeats for r in rs]),
                "mean_completion_tokens": sum(r.completion_tokens for r in rs) / len(rs) if rs else None,
                "accuracy_first_turn": _accuracy([r for r in ans if r.turn == 1]),
                "accuracy_later_turns": _accuracy([r for r in ans if r.turn > 1]),
                "not_found_later_turns_answerable": _share([r.not_found for r in ans if r.turn > 1])}

    sets = sorted({r.qa_set for r in records})
    return {"all": block(list(records)), **{s: block([r for r in records if r.qa_set == s]) for s in sets}}


def gold_shown(golds: Sequence[tuple[str, str]], sources: Sequence[str]) -> bool | None:
    """Whether a source shown (``document - section``) is one of the question's gold sections
    (``(document, section)`` pairs); ``None`` when it names none."""
    return any(s.endswith(key) for _, key in golds for s in sources) if golds else None


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _accuracy(rs: list[ServedAnswer]) -> float | None:
    return _share([r.correct for r in rs])


def pct(value: object) -> str:
    """A share as a percentage, ``-`` for none."""
    return "-" if not isinstance(value, (int, float)) else f"{value:.1%}"


def question_arguments(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the arguments every documentation-QA measurement takes: ``--model``, ``--qa-sets``,
    ``--num-questions``, ``--seed`` and ``--json`` (read the sets with :func:`selected_sets`)."""
    from loom.evals.qa import QA_SETS

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default=None, help="the model (default: Loom's default model)")
    parser.add_argument("--qa-sets", default=",".join(QA_SETS), help="comma-separated qa sets")
    parser.add_argument("--num-questions", type=int, default=None, help="a seeded sample per set (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the records and the summary here")
    return parser


def quantization_argument(parser: argparse.ArgumentParser) -> None:
    """``--quantization`` of a served measurement: ``loom serve``'s weight format."""
    parser.add_argument("--quantization", default="auto", choices=("auto", "int8", "int4", "none"),
                        help="the server's weight format (default auto: the registered model's own)")


def selected_sets(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The ``--qa-sets`` of ``args``; an unknown one exits through ``parser.error`` (status 2)."""
    from loom.evals.qa import select_sets

    try:
        return select_sets(args.qa_sets)
    except ValueError as exc:
        parser.error(f"--qa-sets: {exc}")


def main(argv: Sequence[str] | None = None) -> None:
    from loom.runtime.checkpoint.registry import default_model

    parser = question_arguments("python -m loom.evals.serve_qa", __doc__.split("\n")[0])
    parser.add_argument("--system", default=None,
                        help="the sessions' system prompt (default: the server's; \"\" for none)")
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument("--no-match-answer", default=None,
                         help="the sessions' answer when the documents do not hold one (default: the server's)")
    answers.add_argument("--always-answer", action="store_true",
                         help="sessions whose model always answers (no_match_answer null)")
    parser.add_argument("--concurrency", type=int, default=4, help="sessions in flight")
    parser.add_argument("--questions-per-session", type=int, default=1,
                        help="consecutive questions asked in one session, one after another (default 1)")
    parser.add_argument("--sampling", default=None, type=json.loads,
                        help='the sessions\' sampling fields as JSON, e.g. \'{"repetition_penalty": 1.1}\'')
    parser.add_argument("--max-history-tokens", type=int, default=None, help="the sessions' history cap")
    quantization_argument(parser)
    args = parser.parse_args(argv)
    sets = selected_sets(parser, args)
    records = run(args.model or default_model(), sets, args.num_questions, args.seed, args.system,
                  args.no_match_answer, args.concurrency, questions_per_session=args.questions_per_session,
                  sampling=args.sampling, max_history_tokens=args.max_history_tokens,
                  always_answer=args.always_answer, quantization=args.quantization)
    report(records, args.json, by_turn=args.questions_per_session > 1)


def report(records: Sequence[ServedAnswer], json_path: str | None = None, by_turn: bool = False) -> None:
    """Print :func:`summary` of ``records``, a line per set and one for all (``by_turn``: with accuracy at a
    session's first and later turns), and write it and every record to ``json_path`` when given."""
    result = summary(records)
    for name, b in result.items():
        print(f"{name:7s} accuracy {pct(b['accuracy'])} of {b['answerable']}, not found {pct(b['not_found'])} of "
              f"{b['unanswerable']}, "
              + (f"gold section shown {pct(b['gold_shown'])}, " if b["gold_shown"] is not None else "")
              + "cut at max_tokens "
              f"{pct(b['cut_at_max_tokens'])}, looping {pct(b['repeats'])}, "
              f"mean answer {b['mean_completion_tokens'] or 0:.1f} tokens"
              + (f"; accuracy at a session's first turn {pct(b['accuracy_first_turn'])}, at later turns "
                 f"{pct(b['accuracy_later_turns'])}" if by_turn else ""))
    if json_path:
        Path(json_path).write_text(json.dumps({"summary": result, "records": [asdict(r) for r in records]},
                                              indent=1))


if __name__ == "__main__":
    main()
