"""``loom serve``'s command line: a model that cannot be had or read, a bad setting or a bad flag is
one ``error:`` line naming it and what to do, exit code 2, never a traceback or a pydantic dump (also
for ``loom chat`` and ``loom demo``); vLLM's flag names map onto ``EngineConfig``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from loom.cli.serve import serve
from loom.api.services import engine_args
from loom.api.settings import Settings
from tests.api.server import REPO, _env
from tests.cli.helpers import run_all

# one subprocess per case, all started at once: each is ~3 s of imports, mostly waiting on the same files
CASES = {
    "serve_unknown": ["serve", "no-such-model-xyz", "--no-auth", "--port", "0"],
    "chat_unknown": ["chat", "--model", "no-such-model-xyz"],
    "demo_unknown": ["demo", "--model", "no-such-model-xyz"],
    "serve_unreadable": ["serve", "{weightless}", "--no-auth", "--port", "0"],
    "serve_wrong_type": ["serve", "--max-num-seqs", "many"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("serve-cli")
    weightless = work / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text('{"model_type": "qwen3"}')
    commands = {name: [a.format(weightless=weightless) for a in args] for name, args in CASES.items()}
    return run_all(commands, work, {**_env(), "PYTHONPATH": str(REPO)}, timeout=180)


def _one_error_line(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout
    errors = [ln for ln in (run.stderr + run.stdout).splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, run.stderr
    return errors[0]


@pytest.mark.parametrize("case", ["serve_unknown", "chat_unknown", "demo_unknown"])
def test_unknown_model_is_one_line_naming_it_and_what_to_do(runs, case: str) -> None:
    line = _one_error_line(runs[case])
    assert "model 'no-such-model-xyz' not found" in line
    assert "loom model list" in line and "loom model pull" in line


def test_folder_without_weights_is_one_line_saying_what_it_lacks(runs) -> None:
    line = _one_error_line(runs["serve_unreadable"])
    assert "cannot be read" in line and "weightless has no *.safetensors weights" in line


def test_flag_value_of_the_wrong_type_is_one_line_naming_the_flag(runs) -> None:
    line = _one_error_line(runs["serve_wrong_type"])
    assert "'--max-num-seqs'" in line and "--help" in line


def _invoke(*args: str):  # noqa: ANN202
    app = typer.Typer()
    app.command()(serve)
    return CliRunner().invoke(app, list(args))


def test_model_given_positionally_and_by_flag_differently_is_refused() -> None:
    result = _invoke("model-a", "--model", "model-b")
    assert result.exit_code == 2
    assert "error: the model is given twice: 'model-a' (positional) and --model 'model-b'" in result.output


def test_bad_setting_values_are_one_line_per_field_without_a_pydantic_dump() -> None:
    result = _invoke("m", "--block-size", "0", "--gpu-memory-utilization", "2")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        "error: block_size (--block-size / LOOM_BLOCK_SIZE): Input should be greater than 0, got 0",
        "error: gpu_memory_utilization (--gpu-memory-utilization / LOOM_GPU_MEMORY_UTILIZATION): "
        "Input should be less than or equal to 1, got 2.0",
    ]


@pytest.mark.parametrize(("value", "expected"), [
    ("{method: ngram}", "error: --speculative-config: not valid JSON"),
    ('["ngram"]', "error: --speculative-config: must be a JSON object"),
    ('{"method": "eagle"}', "must be 'ngram' or 'draft_model', got 'eagle'"),
    ('{"method": "ngram", "k": 3}', "unknown key(s) ['k']"),
])
def test_bad_speculative_config_is_one_line(value: str, expected: str) -> None:
    result = _invoke("m", "--speculative-config", value)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.output


def test_speculative_config_takes_vllms_json_and_the_old_flags_fold_into_it() -> None:
    vllm = Settings.load(model="/m", speculative_config=json.loads(
        '{"method": "draft_model", "model": "/draft", "num_speculative_tokens": 3}'))
    assert vllm.speculative_config == {"method": "draft_model", "draft_model": "/draft", "num_speculative_tokens": 3}
    alias = Settings.load(model="/m", speculative_method="draft_model", draft_model="/draft", num_speculative_tokens=3)
    assert alias.speculative_config == vllm.speculative_config and alias.speculative_method is None
    with pytest.raises(ValueError, match="not both"):
        Settings.load(model="/m", speculative_method="ngram", speculative_config={"method": "ngram"})


def test_every_engine_setting_lands_in_the_engine_config_field_of_its_name() -> None:
    from loom.runtime.config import EngineConfig

    settings = Settings.load(model="/m", block_size=32, enable_prefix_caching=False, max_num_batched_tokens=256,
                             max_model_len=512, dtype="bfloat16", device="cpu", gpu_memory_utilization=0.5,
                             max_num_seqs=4, num_kv_blocks=64, speculative_config={"method": "ngram"})
    config = EngineConfig(model="/m", **engine_args(settings))  # an unknown name would be a TypeError
    assert (config.block_size, config.enable_prefix_caching, config.max_num_batched_tokens, config.max_model_len,
            config.dtype, config.device, config.gpu_memory_utilization, config.max_num_seqs,
            config.num_kv_blocks, config.speculative_config.method) == (
        32, False, 256, 512, "bfloat16", "cpu", 0.5, 4, 64, "ngram")


def test_every_engine_flag_is_on_serve_with_vllms_name() -> None:
    app = typer.Typer()
    app.command()(serve)
    flags = {opt for param in typer.main.get_command(app).params for opt in [*param.opts, *param.secondary_opts]}
    for flag in ("--max-num-batched-tokens", "--block-size", "--enable-prefix-caching", "--no-enable-prefix-caching",
                 "--max-model-len", "--dtype", "--device", "--gpu-memory-utilization", "--max-num-seqs",
                 "--num-kv-blocks", "--speculative-config", "--api-key", "--allowed-origins", "--allowed-methods",
                 "--allowed-headers", "--allow-credentials", "--root-path", "--strict"):
        assert flag in flags, flag


def test_bad_values_from_toml_and_env_are_one_line_each_and_an_unknown_key_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "loom.toml"
    toml.write_text('model = "/m"\nmax_num_sequences = 3\n')
    monkeypatch.setenv("LOOM_PORT", "99999")
    result = _invoke("--config", str(toml))
    assert result.exit_code == 2
    assert sorted(result.output.strip().splitlines()) == [
        "error: max_num_sequences: unknown setting (loom serve --help lists them)",
        "error: port (--port / LOOM_PORT): Input should be less than 65536, got '99999'",
    ]
