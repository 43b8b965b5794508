"""Suites as data: deterministic conversations built from a seed.

A :class:`Workload` is a list of conversations (one request each for the
single-turn suites, several turns for ``sessions`` and ``rag``); every length
and the seed are recorded in ``workload.json`` so a run repeats exactly.
Prompt text is cut from the standard library's reference topics
(``pydoc_data.topics``, present on every CPython): windows of the tokenized
corpus of the requested length, decoded to text, so the same workload can be
sent in-process (token ids) or over HTTP (messages).

Suites (default sizes run in seconds with the ``tiny`` checkpoint on 2 cores):

* ``throughput``: independent requests, prompt and output lengths uniform in
  ranges (offline batch, mixed lengths).
* ``prefix``: groups sharing a long system prompt, distinct short questions;
  a quarter of the requests repeat an earlier prompt exactly.
* ``sessions``: multi-turn chats; each turn sends the whole history
  (system + earlier turns with their replies) plus a new user message.
* ``rag``: multi-turn agentic sessions (``orchestrator.Agent``) over the
  ingested stdlib docs with retrieval, memory and tool calls.
* ``spec``: repetitive prompts (prompt lookup has something to match), run
  with speculative decoding off and on.
* ``qa``: the question sets of :mod:`loom.evals.qa` (stdlib, click, jinja;
  the ``sets`` option picks some), one agent turn per question, with
  retrieval on and off, scored by fact containment, citations and "not found"
  (default sizes take a quarter of an hour with the real default model on 2 cores);
  ``index=<set>`` makes every question search that one set's index, so the
  other sets' questions are *off topic* there, and right when answered "not found".
* ``tools``: the prompts of :mod:`loom.evals.toolcalls`, tools offered and never
  forced; scored on the tool picked and its arguments.

``qa`` and ``tools`` take every item of their data file by default;
``num_requests`` picks a seeded sample of that many (in file order), and the
``questions`` / ``cases`` option names items by id (comma-separated).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject
from loom.orchestrator.protocols import Tokenizer, decode_text

SUITES = ("throughput", "prefix", "sessions", "rag", "spec", "qa", "tools")
_DATA = Path(__file__).parent / "data"


def _count(*names: str) -> int:
    return sum(len(json.loads((_DATA / name).read_text())) for name in names)


DEFAULTS: dict[str, JSONObject] = {
    "throughput": dict(num_requests=32, prompt_min=32, prompt_max=256, output_min=16, output_max=64,
                       concurrency=8),
    "prefix": dict(num_requests=24, groups=4, prefix_tokens=256, suffix_tokens=32, output_tokens=16,
                   repeat_fraction=0.25, concurrency=4),
    "sessions": dict(num_requests=4, turns=4, system_tokens=192, user_tokens=96, output_tokens=16,
                     concurrency=4),
    "rag": dict(num_requests=2, turns=3, output_tokens=64, concurrency=2,
                corpus="stdlib:module/json,stdlib:module/collections,stdlib:module/functools,stdlib:module/pathlib",
                index_dir=""),
    "spec": dict(num_requests=8, prompt_tokens=96, output_tokens=64, concurrency=2, num_speculative_tokens=4),
    # one index per question set (the same distractors for any subset); corpus "": the stdlib set's index
    # covers every module its questions touch; sets "": all of them; retrieval: the variants run
    # k=3 puts every stdlib fact in context (k=2: 110/111); 16 in flight: ~4 min per 111 questions, both variants
    "qa": dict(num_requests=_count("qa_stdlib.json", "qa_click.json", "qa_jinja.json"), output_tokens=64,
               concurrency=16, retrieval_k=3, max_retrieval_tokens=640, corpus="", index_dir="", questions="",
               sets="", retrieval="on,off", index=""),
    "tools": dict(num_requests=_count("tool_prompts.json"), output_tokens=96, concurrency=16, cases=""),
}

RAG_QUESTIONS = [
    "How does json.dumps handle sort_keys and indent?",
    "What does collections.OrderedDict.move_to_end do?",
    "Explain the assert statement.",
    "What is the difference between a list comprehension and a generator expression?",
    "How do I join paths with os.path.join?",
    "What does the with statement guarantee about __exit__?",
    "Remember that my project is called Loom and uses SQLite.",
    "What is 17 * 23 + 4?",
    "How do I read a file line by line?",
    "What does functools.lru_cache store?",
]

WARMUP_QUESTION = "Warm-up: say hello."
QA_WARMUP_QUESTION = "What does the built-in print function do?"


@dataclass
class Turn:
    """One user turn: its message, output cap (tokens) and, for ``rag``, a tool choice."""

    user: str
    max_tokens: int
    tool_choice: str | None = None


@dataclass
class Conversation:
    """Turns sent one after another, each with the history of the earlier ones."""

    id: str
    system: str
    turns: list[Turn]


@dataclass
class Workload:
    """A suite instance: measured conversations, warm-up conversations and the sizes used."""

    suite: str
    seed: int
    conversations: list[Conversation]
    warmup: list[Conversation]
    params: JSONObject
    ignore_eos: bool = True
    variants: list[JSONObject] = field(default_factory=list)

    @property
    def num_requests(self) -> int:
        return sum(len(c.turns) for c in self.conversations)

    def to_dict(self) -> JSONObject:
        return asdict(self)


class TextSource:
    """Windows of the tokenized stdlib reference topics, decoded to text.

    Args:
        tokenizer: the model's HF tokenizer.
        max_chars: corpus size read (characters).
    """

    def __init__(self, tokenizer: Tokenizer, max_chars: int = 120_000) -> None:
        import pydoc_data.topics as topics

        text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))[:max_chars]
        self.tokenizer = tokenizer
        self.ids: list[int] = tokenizer.encode(text, add_special_tokens=False, verbose=False)

    def text(self, rng: random.Random, num_tokens: int) -> str:
        """Text of about ``num_tokens`` tokens from a random corpus offset."""
        num_tokens = max(1, min(num_tokens, len(self.ids) - 1))
        start = rng.randrange(0, len(self.ids) - num_tokens)
        return decode_text(self.tokenizer, self.ids[start:start + num_tokens]).strip() or "hello"

    def repetitive(self, rng: random.Random, num_tokens: int, period: int = 24) -> str:
        """Text that repeats a short window (so n-gram prompt lookup finds matches)."""
        unit = self.text(rng, period)
        reps = max(1, num_tokens // period)
        return "\n".join([unit] * reps)


_SOURCES: dict[tuple[str, int], TextSource] = {}


def _text_source(tokenizer: Tokenizer) -> TextSource:
    """One tokenized corpus per tokenizer (tokenizing it takes about a second)."""
    key = (str(getattr(tokenizer, "name_or_path", "")), len(tokenizer))
    if key not in _SOURCES or _SOURCES[key].tokenizer is not tokenizer and not key[0]:
        _SOURCES[key] = TextSource(tokenizer)
    return _SOURCES[key]


def build(suite: str, tokenizer: Tokenizer, seed: int = 0, num_requests: int | None = None,
          warmup: int = 2, options: JSONObject | None = None) -> Workload:
    """Build suite ``suite`` deterministically from ``seed``.

    Args:
        num_requests: requests (single-turn suites) or conversations (``sessions``, ``rag``).
        warmup: warm-up conversations (run first, excluded from the records).
        options: overrides of the suite's sizes (keys of ``DEFAULTS[suite]``).

    Raises:
        ValueError: unknown suite or option, naming it.
    """
    if suite not in SUITES:
        raise ValueError(f"suite: must be one of {SUITES}, got {suite!r}")
    params = dict(DEFAULTS[suite])
    for key, value in (options or {}).items():
        if key not in params:
            raise ValueError(f"option {key!r}: not a setting of suite {suite!r}; known: {sorted(params)}")
        params[key] = value
    if num_requests is not None:
        if num_requests < 1:
            raise ValueError(f"num_requests: must be >= 1, got {num_requests}")
        params["num_requests"] = num_requests

    def make(rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
        if suite in _DATA_BUILDERS:
            return _DATA_BUILDERS[suite](rng, p, tag)
        return _TEXT_BUILDERS[suite](_text_source(tokenizer), rng, p, tag)

    convs = make(random.Random(seed), params, "r")
    warm = make(random.Random(seed + 10_007), {**params, "num_requests": warmup}, "w") if warmup else []
    wl = Workload(suite, seed, convs, warm, params)
    if suite == "spec":
        wl.variants = [{"speculative": "off"},
                       {"speculative": "ngram", "num_speculative_tokens": params["num_speculative_tokens"]}]
    if suite == "qa":
        wl.variants = [{"retrieval": m.strip()} for m in str(params["retrieval"]).split(",") if m.strip()]
    if suite in ("rag", "qa", "tools"):
        wl.ignore_eos = False
    return wl


def _throughput(src: TextSource, rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    return [Conversation(f"{tag}{i}", "", [Turn(src.text(rng, rng.randint(p["prompt_min"], p["prompt_max"])),
                                               rng.randint(p["output_min"], p["output_max"]))])
            for i in range(p["num_requests"])]


def _prefix(src: TextSource, rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    systems = [src.text(rng, p["prefix_tokens"]) for _ in range(p["groups"])]
    out: list[Conversation] = []
    for i in range(p["num_requests"]):
        if out and rng.random() < p["repeat_fraction"]:
            prev = rng.choice(out)
            out.append(Conversation(f"{tag}{i}", prev.system, [Turn(prev.turns[0].user, p["output_tokens"])]))
        else:
            out.append(Conversation(f"{tag}{i}", systems[i % len(systems)],
                                    [Turn(src.text(rng, p["suffix_tokens"]), p["output_tokens"])]))
    return out


def _sessions(src: TextSource, rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    return [Conversation(f"{tag}{i}", src.text(rng, p["system_tokens"]),
                         [Turn(src.text(rng, p["user_tokens"]), p["output_tokens"]) for _ in range(p["turns"])])
            for i in range(p["num_requests"])]


def _rag(src: TextSource, rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    system = "You are Loom's assistant. Answer from the retrieved Python documentation; use tools when useful."
    convs = []
    for i in range(p["num_requests"]):
        turns = []
        for t in range(p["turns"]):
            # warm-up asks its own question, so it never pre-caches a measured turn
            q = WARMUP_QUESTION if tag == "w" else rng.choice(RAG_QUESTIONS)
            # A random-weight model never calls a tool on its own: force one call
            # on every other turn (constrained decoding makes it valid).
            turns.append(Turn(q, p["output_tokens"], "required" if t % 2 == 0 else "auto"))
        convs.append(Conversation(f"{tag}{i}", system, turns))
    return convs


def _spec(src: TextSource, rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    return [Conversation(f"{tag}{i}", "", [Turn(src.repetitive(rng, p["prompt_tokens"]), p["output_tokens"])])
            for i in range(p["num_requests"])]


def _pick(items: tuple[Any, ...], p: JSONObject, rng: random.Random, key: str) -> list[Any]:
    """Items named in option ``key`` (ids, comma-separated), else a seeded sample of ``num_requests``
    in file order (all of them by default)."""
    ids = [x.strip() for x in str(p[key] or "").split(",") if x.strip()]
    if ids:
        by_id = {x.id: x for x in items}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise ValueError(f"option {key}: unknown ids {unknown}")
        return [by_id[i] for i in ids][: p["num_requests"]]
    n = min(p["num_requests"], len(items))
    return list(items) if n == len(items) else [items[i] for i in sorted(rng.sample(range(len(items)), n))]


def _qa(rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    from loom.evals.qa import QA_SETS, QA_SYSTEM_PROMPT, load_questions

    if tag == "w":
        return [Conversation(f"w{i}", QA_SYSTEM_PROMPT, [Turn(QA_WARMUP_QUESTION, p["output_tokens"])])
                for i in range(p["num_requests"])]
    return [Conversation(q.id, QA_SETS[q.qa_set].system_prompt, [Turn(q.question, p["output_tokens"])])
            for q in _pick(load_questions(p["sets"] or None), p, rng, "questions")]


def _tools(rng: random.Random, p: JSONObject, tag: str) -> list[Conversation]:
    from loom.evals.toolcalls import TOOLS_SYSTEM_PROMPT, load_cases

    if tag == "w":
        return [Conversation(f"w{i}", TOOLS_SYSTEM_PROMPT, [Turn(WARMUP_QUESTION, p["output_tokens"], "auto")])
                for i in range(p["num_requests"])]
    return [Conversation(c.id, TOOLS_SYSTEM_PROMPT, [Turn(c.prompt, p["output_tokens"], "auto")])
            for c in _pick(load_cases(), p, rng, "cases")]


_TEXT_BUILDERS = {"throughput": _throughput, "prefix": _prefix, "sessions": _sessions, "rag": _rag, "spec": _spec}
_DATA_BUILDERS = {"qa": _qa, "tools": _tools}  # they read their own data files: no text corpus to tokenize
