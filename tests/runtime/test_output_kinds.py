"""``SamplingParams.output_kind`` (vLLM's RequestOutputKind): cumulative, delta, final_only."""

from __future__ import annotations

import pytest

from loom.runtime.errors import InvalidRequestError
from loom.runtime.sampling_params import SamplingParams
from tests.runtime.helpers import make_engine, random_prompts


def _outputs(engine, kind: str):
    prompt = random_prompts(4096, [9], seed=5)[0]
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, output_kind=kind,
                                              logprobs=1), request_id=kind)
    outs = []
    while engine.has_unfinished_requests():
        outs.extend(o for o in engine.step() if o.request_id == kind)
    return outs


def test_delta_outputs_concatenate_to_the_cumulative_final_output(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    cumulative = _outputs(engine, "cumulative")
    delta = _outputs(engine, "delta")
    final = cumulative[-1]
    assert [t for o in delta for t in o.token_ids] == final.token_ids
    assert "".join(o.text for o in delta) == final.text
    assert sum(len(o.token_times) for o in delta) == len(final.token_times) == 6
    assert sum(len(o.logprobs) for o in delta) == len(final.logprobs) == 6
    assert [o.new_token_ids for o in delta] == [o.new_token_ids for o in cumulative]


def test_final_only_gives_one_output_equal_to_the_cumulative_last(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint("qwen3"))
    final = _outputs(engine, "cumulative")[-1]
    only = _outputs(engine, "final_only")
    assert len(only) == 1 and only[0].finished
    assert only[0].token_ids == final.token_ids and only[0].text == final.text


def test_unknown_output_kind_is_rejected_naming_the_field():
    with pytest.raises(InvalidRequestError, match="output_kind"):
        SamplingParams(output_kind="partial")


def test_vllms_outputs_view_holds_the_one_sequence_under_vllms_names(tiny_checkpoint):
    """Code written for vLLM reads ``out.outputs[0].text``; the view is the request's own fields."""
    engine = make_engine(tiny_checkpoint("qwen3"))
    running, *_, final = _outputs(engine, "cumulative")
    (seq,) = final.outputs
    assert (seq.index, seq.text, seq.token_ids, seq.finish_reason) == (0, final.text, final.token_ids, "length")
    assert seq.finished() and not running.outputs[0].finished() and seq.logprobs == final.logprobs
    sampled = [lp[t] for t, lp in zip(final.token_ids, final.logprobs)]
    assert seq.cumulative_logprob == pytest.approx(sum(sampled)) and seq.cumulative_logprob < 0
