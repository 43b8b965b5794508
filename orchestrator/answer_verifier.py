"""A second, larger model's judgement of whether the passages state an answer: the check words cannot make.

The lexical check (:mod:`loom.orchestrator.grounding`) refuses an answer whose names and numbers the
passages lack.  What it cannot see is a real name put to the wrong use: asked "Which keyword argument
of functools.lru_cache sets a time-to-live for cached entries?" (none does), Qwen2.5-Coder-0.5B
answers "The keyword argument `maxsize` sets a time-to-live for cached entries.", and ``maxsize`` is
in the passage.  Of the 55 unanswerable ``qa`` questions, 12 were answered this way; their answers'
lexical features (question words near the claim, the claim tokens' log-probabilities, MiniLM
similarity of the answer to the passage's sentences) overlap those of right answers.

A model can tell, if it is large enough: an LLM-as-judge groundedness check (RAGAS' faithfulness,
NeMo Guardrails' fact-checking rail, Self-RAG's "is supported" critique), here one prefill and one
decoded token.  The verifier model reads the passages the answer was made from, the question and the
answer, and is asked whether the passages explicitly state the answer; :class:`Verdict` ``margin`` is
``log p("Yes") - log p("No")`` of its first token (nats), and an answer is *stated* when the margin
is at least ``threshold`` (default 0: "Yes" at least as likely as "No").  Measured on the 420
answers of the ``qa`` suite that passed the lexical check (Qwen2.5-Coder-0.5B-Instruct int8
answering, docs/evaluations.md): Qwen2.5-Coder-0.5B as its own verifier is at chance (margins of
right answers and of unanswerable questions' answers interleave between -0.9 and -0.1);
Qwen2.5-Coder-1.5B-Instruct puts 5 of the 12 unanswerable ones below 0 and none of the 309 right
answers, each shown the passages its answer was made from.

An answer the verifier rejects is treated as the lexical check treats an ungrounded one
(``loom.orchestrator.answer_check``): the model answers again shown every related hit, then
``no_match_answer``.  The call carries the agent's ``cache_salt``, so one API key's passages and
answers never share the verifier's prefix cache with another's.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from loom.orchestrator.engine_client import EngineClient
from loom.orchestrator.protocols import Engine
from loom.runtime.sampling_params import SamplingParams

#: The reason an answer the verifier rejects is given (``RunResult.unsupported``).
NOT_STATED = "(not stated in the passages, by the verifier)"
SYSTEM = "You check answers against documentation. Reply with Yes or No only."
QUESTION = ("{passages}\n\nQuestion: {question}\nProposed answer: {answer}\n\n"
            "Does the documentation above explicitly state this answer? Reply Yes or No.")
#: Top log-probabilities read from the verifier's one token: "Yes" or "No" outside them counts as this
#: far below the least likely of them (both are among the top few for any instruction-tuned model).
TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Verdict:
    """The verifier's reading of one answer.

    Attributes:
        margin: ``log p("Yes") - log p("No")`` of the verifier's first token, in nats; ``None`` when the
            prompt did not fit the verifier's window (the answer is then not judged).
        stated: ``margin`` is at least the verifier's threshold, or the answer was not judged.
        prompt_tokens: tokens of the verifier's prompt.
    """

    margin: float | None
    stated: bool
    prompt_tokens: int


class AnswerVerifier:
    """Judges whether passages state an answer, with a model of its own (module docstring).

    Args:
        llm: the verifier's engine (``runtime.LLM`` or ``runtime.AsyncLLM``), typically a larger model
            than the agent's: Qwen2.5-Coder-1.5B-Instruct for Qwen2.5-Coder-0.5B.
        threshold: the least ``Verdict.margin`` (nats) of a stated answer; default 0.

    Raises:
        ValueError: ``threshold`` is not a finite number, or the tokenizer writes "Yes" and "No" with
            the same first token.
    """

    def __init__(self, llm: Engine, threshold: float = 0.0) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
            raise ValueError(f"threshold: must be a finite number, got {threshold!r}")
        self.engine = EngineClient(llm)
        self.threshold = float(threshold)
        tok = self.engine.tokenizer
        self.yes, self.no = (tok.encode(w, add_special_tokens=False)[0] for w in ("Yes", "No"))
        if self.yes == self.no:
            raise ValueError("the verifier's tokenizer starts 'Yes' and 'No' with the same token")

    @classmethod
    def from_model(cls, model: str, threshold: float = 0.0) -> AnswerVerifier:
        """A verifier on an engine of its own (``runtime.AsyncLLM``) for ``model``: a registered name (run in its
        registered weight format), a folder or a ``.gguf`` file.  :meth:`shutdown` stops the engine.

        Raises:
            whatever ``AsyncLLM`` raises for a model it cannot load; ``ValueError`` as the constructor.
        """
        from loom.runtime import AsyncLLM

        llm = AsyncLLM(model)
        try:
            return cls(llm, threshold)
        except BaseException:
            llm.shutdown()
            raise

    def shutdown(self) -> None:
        """Stop the verifier's engine (``AsyncLLM.shutdown``; nothing for an engine without one)."""
        stop = getattr(self.engine.llm, "shutdown", None)
        if stop is not None:
            stop()

    def prompt(self, passages: Sequence[str], question: str, answer: str) -> list[int]:
        """The verifier's prompt token ids: its chat template over :data:`SYSTEM` and :data:`QUESTION`."""
        tok = self.engine.tokenizer
        user = QUESTION.format(passages="\n\n".join(passages), question=question, answer=answer)
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                                       tokenize=False, add_generation_prompt=True)
        return list(tok.encode(text, add_special_tokens=False))

    async def verdict(self, passages: Sequence[str], question: str, answer: str,
                      cache_salt: str | None = None) -> Verdict:
        """Whether ``passages`` (the texts the answer was made from) state ``answer`` to ``question``.

        Args:
            cache_salt: ``SamplingParams.cache_salt`` of the call (the asking agent's).

        Raises:
            whatever the verifier's engine raises at submission, but a prompt longer than its window,
            which gives a :class:`Verdict` with ``margin=None``.
        """
        ids = self.prompt(passages, question, answer)
        if len(ids) >= self.engine.max_model_len:
            return Verdict(None, True, len(ids))
        sp = SamplingParams(temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS, cache_salt=cache_salt)
        last = None
        async for out in self.engine.stream(ids, sp, f"verify-{uuid.uuid4().hex[:12]}"):
            last = out
        top = (last.logprobs or [{}])[0] if last is not None else {}
        floor = min(top.values(), default=0.0) - 1.0
        margin = top.get(self.yes, floor) - top.get(self.no, floor)
        return Verdict(margin, margin >= self.threshold, len(ids))
