"""A documentation-QA agent with an ``AnswerVerifier`` refuses an answer the verifier model finds unstated by the
passages, as it refuses an ungrounded one (``loom.orchestrator.answer_verifier``).

The agent's rule is tested with stand-ins (ScriptedLLM answering, ScriptedJudge giving the verifier's "Yes"/"No"
log-probabilities: the rule is the agent's, not the models'); the verifier's prompt and margin with the real small
model (SmolLM2-135M-Instruct: its judgement is noise, its shapes are real)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loom.orchestrator import Agent, InMemorySession
from loom.orchestrator.answer_verifier import NOT_STATED, AnswerVerifier
from loom.runtime.outputs import RequestOutput

from tests.orchestrator.scripted_llm import ScriptedLLM

NOT_FOUND = "The indexed documents do not cover this."
ANSWER = "Call cancel() on the task."


class ScriptedJudge:
    """Verifier engine stand-in (test-only): its one token is "Yes" or "No" by the scripted margins, in order."""

    def __init__(self, tokenizer: Any, margins: list[float], max_model_len: int = 4096) -> None:
        self.tokenizer, self.margins, self.max_model_len = tokenizer, list(margins), max_model_len
        self.prompts: list[list[int]] = []
        self.salts: list[str | None] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        self.prompts.append(list(prompt_token_ids))
        self.salts.append(sampling_params.cache_salt)
        margin = self.margins.pop(0)
        yes, no = (self.tokenizer.encode(w, add_special_tokens=False)[0] for w in ("Yes", "No"))
        await asyncio.sleep(0)
        now = time.monotonic()
        out = RequestOutput(request_id=request_id or "v", prompt_token_ids=list(prompt_token_ids),
                            arrival_time=now, first_token_time=now, finish_time=now)
        out.token_ids = [yes if margin >= 0 else no]
        out.new_token_ids = list(out.token_ids)
        out.logprobs = [{yes: -1.0 + margin / 2, no: -1.0 - margin / 2}]
        out.finished, out.finish_reason = True, "length"
        yield out


def _agent(tokenizer: Any, retriever: Any, replies: list[str], margins: list[float], **kw: Any) -> tuple[Agent, Any]:
    judge = ScriptedJudge(tokenizer, margins)
    agent = Agent(ScriptedLLM(tokenizer, replies), retriever=retriever, no_match_answer=NOT_FOUND,
                  condense_question=False, similarity_cutoff=None, verifier=AnswerVerifier(judge), **kw)
    return agent, judge


async def test_an_answer_the_verifier_finds_stated_stands_and_its_margin_is_kept(tokenizer, retriever):
    agent, judge = _agent(tokenizer, retriever, [ANSWER], [1.5])
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.widened, result.unsupported) == (ANSWER, False, [])
    assert result.verifier_margins == [pytest.approx(1.5)] and result.timings["verifier"] >= 0
    prompt = tokenizer.decode(judge.prompts[0])  # the passage the answer was made from, the question, the answer
    assert prompt.count("<document source=") == 1 and "How do I cancel an asyncio task?" in prompt
    assert prompt.index("<document source=") < prompt.index("Proposed answer: " + ANSWER)


async def test_an_answer_the_verifier_rejects_is_made_again_from_every_hit_then_is_the_no_match_answer(
        tokenizer, retriever):
    agent, judge = _agent(tokenizer, retriever, [ANSWER, ANSWER], [-0.5, -0.2])
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.widened, result.unsupported) == (NOT_FOUND, True, [NOT_STATED])
    assert result.rejected == [ANSWER, ANSWER] and result.verifier_margins == [pytest.approx(-0.5), pytest.approx(-0.2)]
    assert tokenizer.decode(judge.prompts[1]).count("<document source=") == len(result.retrieved) == 4


async def test_a_rejected_first_answer_can_stand_once_made_from_every_hit(tokenizer, retriever):
    agent, judge = _agent(tokenizer, retriever, [ANSWER, ANSWER], [-0.5, 0.0])
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.widened, result.rejected, result.unsupported) == (ANSWER, True, [ANSWER], [])
    assert len(judge.prompts) == 2


async def test_the_lexical_check_rejects_first_so_an_ungrounded_answer_costs_no_verifier_call(tokenizer, retriever):
    agent, judge = _agent(tokenizer, retriever, ["Use `asyncio.shield_all()` for that."] * 2, [])
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert result.answer == NOT_FOUND and result.unsupported == ["asyncio.shield_all()"]
    assert judge.prompts == [] and result.verifier_margins == []


@pytest.mark.parametrize("margin", [0.5, -0.5])
async def test_an_attributed_answer_stands_only_when_the_verifier_finds_it_stated_by_the_sections_found(
        tokenizer, retriever, margin):
    # shown only Tasks > Cancellation; the attribution search finds asyncio.create_task in Tasks, which the
    # verifier is shown with it (answer_check's attribution search)
    answer = "Call cancel() on a task that `asyncio.create_task` made."
    judge = ScriptedJudge(tokenizer, [margin])
    agent = Agent(ScriptedLLM(tokenizer, [answer]), retriever=retriever, no_match_answer=NOT_FOUND,
                  condense_question=False, retrieval_k=1, verifier=AnswerVerifier(judge))
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    prompt = tokenizer.decode(judge.prompts[0])
    assert prompt.count("<document source=") == 2 and "asyncio.create_task" in prompt
    if margin > 0:
        assert (result.answer, [h.section for h in result.attributed]) == (answer, ["Tasks"])
    else:
        assert (result.answer, result.attributed, result.unsupported) == (NOT_FOUND, [], ["asyncio.create_task"])


async def test_the_verifier_call_carries_the_agents_cache_salt(tokenizer, retriever):
    agent, judge = _agent(tokenizer, retriever, [ANSWER], [1.0], cache_salt="key-a")
    await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert judge.salts == ["key-a"]


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), "0"])
def test_the_threshold_must_be_a_finite_number(tokenizer, bad):
    with pytest.raises(ValueError, match="threshold"):
        AnswerVerifier(ScriptedJudge(tokenizer, []), threshold=bad)


@pytest.fixture(scope="module")
def smol_verifier(real_model):
    from loom.runtime import AsyncLLM

    engine = AsyncLLM(str(real_model), max_model_len=256)
    yield AnswerVerifier(engine)
    engine.shutdown()


async def test_the_real_verifier_reads_its_margin_from_one_token_and_passes_what_cannot_fit(smol_verifier):
    passage = ('<document source="json.md">\nIf sort_keys is true, the output of dictionaries is sorted by key.\n'
               '</document>')
    verdict = await smol_verifier.verdict([passage], "Which argument of json.dumps sorts dictionaries by key?",
                                          "The argument is `sort_keys`.")
    assert verdict.margin is not None and math.isfinite(verdict.margin)
    assert verdict.stated == (verdict.margin >= 0) and 40 < verdict.prompt_tokens < 256
    too_long = await smol_verifier.verdict([passage * 20], "Which argument sorts?", "`sort_keys`.")
    assert (too_long.margin, too_long.stated) == (None, True) and too_long.prompt_tokens >= 256
