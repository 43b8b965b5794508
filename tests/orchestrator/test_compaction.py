"""Compaction that keeps the prefix cache.

Policy tests run on the real tokenizer with hand-built items (no model);
the session test runs :mod:`benchmarks.compaction_session` on the
real default model, the real MiniLM embedder and a FAISS index over the
standard library's documentation.
"""

from __future__ import annotations

import pytest

from loom.orchestrator import ContextBudget
from loom.orchestrator import compaction_plan as comp
from loom.orchestrator.context import ContextBuilder
from loom.orchestrator.items import message_item


def _session(b: ContextBuilder, turns: int, doc_words: int = 150) -> list[dict]:
    items: list[dict] = []
    for t in range(1, turns + 1):
        hit = type("Hit", (), {"text": f"doc{t} " + "word " * doc_words, "document": f"d{t}", "section": ""})()
        items += b.turn_items(items, t, f"question {t}?", [hit])
        reply = b.renderer.encode(f"answer {t}.")
        items.append(b.assistant_item(t, reply, content=f"answer {t}."))
    return items


def test_retention_hides_older_turns_documents_first_and_keeps_the_dialogue(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "sys", None, ContextBudget(max_model_len=1400, reserved_output=32,
                                                             keep_retrieval_turns=2))
    items = _session(b, 8)
    plan = b.plan_compaction(items, 9, extra_tokens=200)
    assert plan is not None and plan.docs and not plan.turns and not plan.steps
    hidden = {i for g in plan.groups for i in g}
    assert all(items[i]["kind"] == "retrieval" for i in hidden)  # documents only
    assert all(items[i]["turn"] <= 6 for i in hidden)  # the two newest earlier turns keep theirs
    assert min(items[i]["turn"] for i in hidden) == 1  # oldest first
    items.append(comp.marker(8, plan.groups, after_turn=True))
    text = tokenizer.decode(b.build(items, 9).token_ids, skip_special_tokens=False)
    assert all(f"question {t}?" in text and f"answer {t}." in text for t in range(1, 9))  # dialogue kept
    ctx = b.build(items, 9)
    assert ctx.history_tokens <= b.budget.low_water * b.budget.history_cap(len(b.header_ids) + 200
                                                                             + len(b.gen_prompt_ids))


def test_whole_turns_go_only_when_hiding_documents_is_not_enough(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "sys", None, ContextBudget(max_model_len=700, reserved_output=32,
                                                             keep_retrieval_turns=1, low_water=0.4))
    items = _session(b, 10, doc_words=60)
    plan = b.plan_compaction(items, 11, extra_tokens=100)
    assert plan is not None and plan.docs and plan.turns
    doc_turns = {items[g[0]]["turn"] for g in plan.docs}
    assert max(doc_turns) <= 9 and 10 not in doc_turns  # the newest earlier turn keeps its documents
    assert [items[g[0]]["turn"] for g in plan.turns] == sorted(items[g[0]]["turn"] for g in plan.turns)


def test_old_policy_is_whole_turns_only(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "sys", None, ContextBudget(max_model_len=1400, reserved_output=32,
                                                             keep_retrieval_turns=None))
    items = _session(b, 8)
    plan = b.plan_compaction(items, 9, extra_tokens=200)
    assert plan is not None and not plan.docs and plan.turns
    assert {items[i]["kind"] for g in plan.turns for i in g} == {"retrieval", "user", "assistant"}


def test_only_items_after_a_markers_cut_are_rebuilt(tokenizer) -> None:
    b = ContextBuilder(tokenizer, "sys", None, ContextBudget(max_model_len=4096))
    items = _session(b, 3)  # per turn: retrieval, user, assistant
    items.append(comp.marker(3, [[3]], after_turn=True))  # hides turn 2's retrieval
    assert comp.rebuilt(items) == set(range(4, 9))  # turn 1 stays as first shown; turn 3 included (after turn)
    items.append(comp.marker(4, [[6]]))  # an in-turn marker of turn 4 covers turns < 4
    assert comp.rebuilt(items) == set(range(4, 9))
    assert comp.rebuilt(items + [comp.marker(4, [], {"kind": "summary"})]) == set(range(0, 9))


def test_budget_rejects_bad_retention_settings_naming_the_field() -> None:
    with pytest.raises(ValueError, match="keep_retrieval_turns"):
        ContextBudget(keep_retrieval_turns=-1)
    with pytest.raises(ValueError, match="next_turn_tokens"):
        ContextBudget(next_turn_tokens="many")
    with pytest.raises(ValueError, match="prefill_after_turn"):
        ContextBudget(prefill_after_turn="yes")


# --- the retrieval-heavy session on the real model -------------------------------------------
# A 2k window with two chunks a turn fills every few turns: 10 turns see three compactions and
# weigh the cold first turn little enough (``python -m benchmarks.compaction_session`` runs 30
# turns of six chunks in a 4k window; both meet the same goals).
TURNS, WINDOW, K = 10, 2048, 2

@pytest.fixture(scope="module")
def stdlib_index(tmp_path_factory):
    from benchmarks.compaction_session import open_index

    return open_index(tmp_path_factory.mktemp("compaction-index"))


@pytest.fixture(scope="module")
def smollm(real_model, real_quantization):
    from loom.runtime import AsyncLLM

    engine = AsyncLLM(str(real_model), max_model_len=WINDOW, quantization=real_quantization)
    yield engine
    engine.shutdown()


async def test_retrieval_heavy_session_in_a_small_window_keeps_every_turn_cached(smollm, stdlib_index) -> None:
    """The compaction goals on the first turns of the benchmark's session: no turn below 50% cached,
    >= 85% of the prompt tokens after the first turn cached, every compaction prefilled after its turn."""
    from benchmarks.compaction_session import run_session

    # "model": the goal's figures were set with a rewrite call per turn, whose prompt is the session's cached
    # prefix; the default ("history", no call) computes fewer tokens (1,910 against 2,438 on these turns) but
    # has no such cached calls to add, so its share is lower (83.8%) for the same compaction behaviour
    rows = await run_session(smollm, stdlib_index, turns=TURNS, window=WINDOW, max_tokens=32, k=K,
                             condense_question="model")
    assert sum(r.compactions for r in rows) >= 2, rows  # the window did fill up, more than once
    assert all(r.after_turn_tokens for r in rows if r.compactions), rows  # made and prefilled after the turn
    assert all(r.cached_share >= 0.5 for r in rows[1:]), [(r.turn, r.cached_share) for r in rows]
    warm = rows[1:]
    assert sum(r.cached_tokens for r in warm) / sum(r.prompt_tokens for r in warm) >= 0.85
    assert all(r.expected_retrieved for r in rows), [r.turn for r in rows if not r.expected_retrieved]
    import asyncio

    while smollm.engine.has_unfinished_requests():  # the last stream's blocks are freed at its final step
        await asyncio.sleep(0.05)
    stats = smollm.engine.stats()  # read while the engine thread idles
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"], stats  # no request left holding blocks


async def test_scripted_failing_prefill_never_fails_the_turn_and_the_next_turn_still_fits(tokenizer) -> None:
    """Orchestration logic with a scripted model: the engine refuses the after-turn prefill."""
    from loom.orchestrator import Agent, InMemorySession
    from loom.orchestrator.compaction_hooks import PREFILL_REQUEST_PREFIX
    from tests.orchestrator.scripted_llm import ScriptedLLM

    class RefusesPrefill(ScriptedLLM):
        async def generate(self, prompt_token_ids, sampling_params, request_id=None):
            if (request_id or "").startswith(PREFILL_REQUEST_PREFIX):
                raise RuntimeError("engine is full")
            async for out in super().generate(prompt_token_ids, sampling_params, request_id):
                yield out

    llm = RefusesPrefill(tokenizer, [], max_model_len=1024)
    agent = Agent(llm, budget=ContextBudget(reserved_output=32, max_history_tokens=300, next_turn_tokens=40))
    session = InMemorySession()
    for i in range(10):
        llm.replies = [f"Reply number {i} with a few words of padding to grow the history quickly."]
        result = await agent.arun(f"message {i}", session=session)
        assert result.final_state == "done" and result.answer.startswith(f"Reply number {i}")
        assert all(len(p) <= agent.budget.prompt_limit for p in llm.prompts)
    markers = [it for it in session.get_items() if it["kind"] == "compaction"]
    assert markers and all(m["after_turn"] for m in markers)  # stored before the prefill; kept when it fails
    assert sum(it["kind"] == "user" for it in session.get_items()) == 10
