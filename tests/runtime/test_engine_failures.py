"""A step that fails, or one request that cannot go on, fails only its own requests.

Faults are injected into a real engine (tiny random checkpoint): the model
runner's forward raises once, or one request's grammar breaks mid-generation.
"""

from __future__ import annotations

import pytest

from loom.runtime import SamplingParams
from loom.runtime.errors import InvalidRequestError
from loom.runtime.structured_output.matcher import GrammarError
from loom.runtime.structured_output.params import StructuredOutputParams
from tests.runtime.helpers import assert_pool_idle, greedy, make_engine, random_prompts, run_to_completion


def _fail_next_forward(engine, exc: BaseException) -> None:
    real = engine.runner.execute_model

    def failing(*args, **kwargs):
        engine.runner.execute_model = real
        raise exc

    engine.runner.execute_model = failing


def test_a_failed_forward_never_leaves_its_prefix_blocks_hittable(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    prompt = random_prompts(1000, [80], seed=3)[0]
    clean = run_to_completion(make_engine(path), [("c", prompt, greedy(12))])["c"].token_ids

    engine = make_engine(path)
    engine.add_request(prompt, greedy(12), request_id="victim")
    _fail_next_forward(engine, RuntimeError("CUDA out of memory"))
    outs = engine.step()
    assert [(o.request_id, o.finish_reason) for o in outs] == [("victim", "error")]
    assert outs[0].error == "the model step failed (RuntimeError)"
    assert_pool_idle(engine)
    # the victim's blocks were registered when scheduled; their KV was never written
    again = run_to_completion(engine, [("again", prompt, greedy(12))])["again"]
    assert again.num_cached_tokens == 0
    assert again.token_ids == clean


def test_a_failed_step_fails_only_the_requests_it_scheduled(tiny_checkpoint):
    path = tiny_checkpoint("qwen3")
    engine = make_engine(path, max_num_seqs=2)
    prompts = random_prompts(1000, [20, 21, 22], seed=4)
    for i, p in enumerate(prompts):
        engine.add_request(p, greedy(6), request_id=f"r{i}")
    _fail_next_forward(engine, RuntimeError("kernel error"))
    failed = {o.request_id for o in engine.step() if o.finish_reason == "error"}
    assert failed == {"r0", "r1"}  # r2 was waiting (max_num_seqs=2): untouched
    rest = run_to_completion(engine)
    assert rest["r2"].finish_reason == "length" and len(rest["r2"].token_ids) == 6
    assert_pool_idle(engine)


def test_an_interrupt_mid_step_cleans_up_and_reports_the_step_requests(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    engine.add_request([1, 2, 3, 4], greedy(4), request_id="r")
    _fail_next_forward(engine, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    outs = engine.step()  # the interrupted step's outputs come with the next one
    assert [(o.request_id, o.finish_reason) for o in outs] == [("r", "error")]
    assert not engine.has_unfinished_requests()
    assert_pool_idle(engine)


def test_a_schema_that_admits_no_output_is_refused_at_submission(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    params = SamplingParams(max_tokens=8, structured_output=StructuredOutputParams(json={"$ref": "#"}))
    with pytest.raises(InvalidRequestError) as err:
        engine.add_request([1, 2, 3], params)
    assert err.value.param == "structured_output"
    assert "<state>" not in str(err.value) and "\n" not in str(err.value)
    assert not engine.has_unfinished_requests()


def test_a_grammar_that_breaks_mid_generation_fails_only_its_request(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    json_params = SamplingParams(temperature=0.0, max_tokens=16,
                                 structured_output=StructuredOutputParams(json_object=True))
    engine.add_request([1, 2, 3], json_params, request_id="broken")
    for i in range(3):
        engine.add_request([4 + i, 5, 6], greedy(8), request_id=f"ok{i}")
    engine.step()  # prefill; the broken request has its first token
    matcher = engine.requests["broken"].structured_state

    def breaks(*args, **kwargs):
        raise GrammarError("the output constraint cannot be continued by any token")

    matcher.fill_bitmask = breaks
    outs = run_to_completion(engine)
    assert outs["broken"].finish_reason == "error"
    assert outs["broken"].error.startswith("structured_output:")
    assert outs["broken"].error_param == "structured_output"
    assert all(outs[f"ok{i}"].finish_reason == "length" for i in range(3))
    assert_pool_idle(engine)
