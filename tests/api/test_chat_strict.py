"""``loom serve --strict``: OpenAI's behaviour for unknown request fields (a 400 naming the field).

The default (vLLM's: accept, log once) is checked in ``test_chat_fields.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.api.server import Server

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def strict_client(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    work = tmp_path_factory.mktemp("api-strict")
    srv = Server(checkpoint, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--strict",
                 "--max-model-len", "256", "--num-kv-blocks", "32").start()
    yield openai.OpenAI(api_key="unused", base_url=srv.url + "/v1", max_retries=0, timeout=60)
    srv.stop()


def _param(call) -> str:  # noqa: ANN001
    with pytest.raises(openai.BadRequestError) as info:
        call()
    return info.value.body["param"]


def test_strict_server_answers_400_naming_an_unknown_top_level_or_nested_field(strict_client):
    model = strict_client.models.list().data[0].id
    create = strict_client.chat.completions.create
    assert _param(lambda: create(model=model, messages=USER, max_tokens=1, extra_body={"temprature": 0.5})) \
        == "temprature"
    msgs = [{"role": "user", "content": "hi", "mood": "sunny"}]
    assert _param(lambda: create(model=model, messages=msgs, max_tokens=1)) == "messages.0.mood"
    assert _param(lambda: create(model=model, messages=USER, max_tokens=1,
                                 extra_body={"structured_outputs": {"regex": "a", "flavour": 1}})) \
        == "structured_outputs.flavour"


def test_strict_server_still_takes_every_known_vllm_field(strict_client):
    model = strict_client.models.list().data[0].id
    r = strict_client.chat.completions.create(
        model=model, messages=USER, max_tokens=3, n=2, logprobs=True, top_logprobs=1, stream_options=None,
        extra_body={"min_tokens": 1, "stop_token_ids": [0], "ignore_eos": False, "top_k": 5,
                    "chat_template_kwargs": {"enable_thinking": False}, "guided_regex": "[a-z]+"})
    assert [c.index for c in r.choices] == [0, 1]
