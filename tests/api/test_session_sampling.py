"""A session's ``sampling`` reaches the engine field for field (``api.turns.session_sampling_params``)."""

from __future__ import annotations

import dataclasses

from loom.api.schemas.sessions import SessionSampling
from loom.api.turns import session_sampling_params


def test_every_session_sampling_field_is_the_engine_sampling_field_of_the_same_name():
    cfg = SessionSampling(temperature=0.3, top_p=0.9, top_k=20, max_tokens=64, seed=7, stop=["\n\n"],
                          repetition_penalty=1.05, frequency_penalty=0.4, presence_penalty=-0.2)
    params = session_sampling_params(cfg)
    engine_fields = {f.name for f in dataclasses.fields(params)}
    assert set(SessionSampling.model_fields) <= engine_fields  # a new session field must reach the engine too
    assert {name: getattr(params, name) for name in SessionSampling.model_fields} == cfg.model_dump()


def test_a_session_that_sets_no_sampling_decodes_greedily_with_no_penalty():
    params = session_sampling_params(SessionSampling())
    assert (params.temperature, params.repetition_penalty, params.frequency_penalty, params.presence_penalty,
            params.max_tokens) == (0.0, 1.0, 0.0, 0.0, 256)
