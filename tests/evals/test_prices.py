"""Price table: TOML loading, output-priced reasoning and tool calls, clear errors."""

from __future__ import annotations

import pytest

from loom.evals.prices import Prices, load_prices


def test_reasoning_and_tool_calls_are_priced_as_output_by_default(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("input = 2.0\ncached_input = 0.5\noutput = 8.0\ngpu_second = 0.001\n")
    p = load_prices(path)
    assert p.output_price("reasoning") == 8.0 and p.output_price("tool_call") == 8.0
    assert p.prompt_cost(cached=1_000_000, computed=500_000) == pytest.approx(0.5 + 1.0)
    assert p.output_cost("reasoning", 250_000) == pytest.approx(2.0)
    assert p.gpu_second == 0.001


def test_sections_and_explicit_reasoning_price(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[tokens]\ninput = 1.0\noutput = 3.0\nreasoning = 6.0\n[gpu]\nsecond = 0.002\n")
    p = load_prices(path)
    assert p.output_price("reasoning") == 6.0 and p.output_price("tool_call") == 3.0
    assert p.gpu_second == 0.002


def test_unknown_key_and_negative_price_are_named(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("inputt = 1.0\n")
    with pytest.raises(ValueError, match="inputt"):
        load_prices(path)
    with pytest.raises(ValueError, match="prices.output"):
        Prices(output=-1.0)
    with pytest.raises(FileNotFoundError):
        load_prices(tmp_path / "missing.toml")


def test_shipped_example_price_table_loads():
    from pathlib import Path

    from loom import evals

    p = load_prices(Path(evals.__file__).parent / "prices.example.toml")
    assert (p.input, p.cached_input, p.output, p.output_price("reasoning"), p.gpu_second) == \
        (1.0, 0.1, 4.0, 4.0, 0.000556)


def test_gpu_name_loads_from_top_level_or_gpu_table_and_must_be_text(tmp_path):
    top, table = tmp_path / "top.toml", tmp_path / "table.toml"
    top.write_text('gpu_second = 0.001\ngpu_name = "L4"\n')
    table.write_text('[gpu]\nsecond = 0.002\nname = "A100 80GB"\n')
    assert (load_prices(top).gpu_name, load_prices(table).gpu_name) == ("L4", "A100 80GB")
    assert Prices().gpu_name == "H100"
    with pytest.raises(ValueError, match="prices.gpu_name"):
        Prices(gpu_name="")


def test_gpu_cost_is_hypothetical_off_cuda_and_plain_on_it():
    from loom.evals.prices import gpu_cost_label

    p = Prices(gpu_second=2.5 / 3600, gpu_name="A100")
    assert gpu_cost_label(p, "cuda") == "A100 at 2.50 USD/h"
    assert gpu_cost_label(p, "cpu") == "hypothetical: priced as if on A100 at 2.50 USD/h (this run was on CPU)"
    assert gpu_cost_label(p, None) == "priced as if on A100 at 2.50 USD/h (the target's device is not known)"
