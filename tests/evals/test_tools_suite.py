"""The tools suite: argument checks and call scoring on hand-made calls, and a small real unforced
run on the default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest

from loom import evals
from loom.evals.toolcalls import (ToolCase, check_arguments, convert_units, eval_tools, get_weather, load_cases,
                             score_calls, tools_quality)

SCHEMAS = {t.name: t.openai_schema()["function"]["parameters"] for t in eval_tools()}
CASES = {c.id: c for c in load_cases()}
KM_TO_MI = ToolCase("k", "Convert 10 km to miles.", "convert_units",
                    {"value": {"equals": 10}, "from_unit": {"one_of": ["km"]}, "to_unit": {"one_of": ["mi", "miles"]}})


def test_argument_checks_compare_numbers_strings_and_calculator_values():
    assert check_arguments({"expression": "5678 * 1234"}, CASES["calc-product"].arguments)
    assert not check_arguments({"expression": "1234 + 5678"}, CASES["calc-product"].arguments)
    assert not check_arguments({"expression": "import os"}, CASES["calc-product"].arguments)
    assert check_arguments({"city": "Paris, France"}, {"city": {"contains": ["paris"]}})
    assert check_arguments({"value": 10.0000001, "from_unit": "KM", "to_unit": "Miles"}, KM_TO_MI.arguments)
    assert not check_arguments({"value": "10", "from_unit": "km", "to_unit": "mi"}, KM_TO_MI.arguments)
    assert not check_arguments({"value": 10, "from_unit": "km"}, KM_TO_MI.arguments)  # missing argument


def test_first_call_is_scored_for_tool_schema_and_values():
    good = score_calls(KM_TO_MI, [("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"}, None),
                                  ("get_time", {"timezone": "UTC"}, None)], SCHEMAS)
    assert (good.called, good.num_calls, good.picked_right, good.schema_valid, good.args_match) == \
        ("convert_units", 2, True, True, True)
    wrong_value = score_calls(KM_TO_MI, [("convert_units", {"value": 12, "from_unit": "km", "to_unit": "mi"}, None)],
                              SCHEMAS)
    assert wrong_value.picked_right and wrong_value.schema_valid and not wrong_value.args_match
    extra_arg = score_calls(KM_TO_MI, [("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi",
                                                          "precision": 2}, None)], SCHEMAS)
    assert extra_arg.picked_right and not extra_arg.schema_valid and not extra_arg.args_match
    wrong_tool = score_calls(KM_TO_MI, [("calculator", {"expression": "10 / 1.609"}, None)], SCHEMAS)
    assert wrong_tool.called == "calculator" and not wrong_tool.picked_right and wrong_tool.schema_valid
    malformed = score_calls(KM_TO_MI, [("", {}, "invalid JSON")], SCHEMAS)
    assert malformed.called == "" and malformed.num_calls == 1 and malformed.malformed
    assert not malformed.picked_right and not malformed.schema_valid and not malformed.args_match
    none = score_calls(KM_TO_MI, [], SCHEMAS)
    assert none.called is None and not none.picked_right and not none.args_match
    abstain = score_calls(CASES["none-greeting"], [], SCHEMAS)
    assert abstain.picked_right and abstain.args_match


def test_quality_rates_split_tool_prompts_from_no_tool_prompts():
    def rec(expected, called, right, valid, match, malformed=False):
        return {"ok": True, "expected_tool": expected, "called": called, "num_calls": int(called is not None),
                "picked_right": right, "schema_valid": valid, "args_match": match, "malformed": malformed}

    q = tools_quality([rec("calculator", "calculator", True, True, True),
                       rec("calculator", "calculator", True, True, False),
                       rec("get_time", "get_weather", False, True, False),
                       rec("get_time", None, False, False, False),
                       rec("get_weather", "", False, False, False, malformed=True),
                       rec(None, None, True, False, True), rec(None, "get_time", False, True, False)])
    assert (q["tool_prompts"], q["no_tool_prompts"]) == (5, 2)
    assert q["pick_rate"] == 0.4 and q["schema_valid_rate"] == 0.4 and q["valid_args_rate"] == 0.2
    assert q["wrong_tool_rate"] == 0.2 and q["no_call_rate"] == 0.2 and q["malformed_rate"] == 0.2
    assert q["no_tool_abstain_rate"] == 0.5
    assert q["by_tool"]["calculator"] == {"prompts": 2, "pick_rate": 1.0, "valid_args_rate": 0.5}


def test_eval_tools_answer_deterministically():
    assert _call(convert_units, value=10, from_unit="km", to_unit="miles") == "6.21371 miles"
    assert _call(convert_units, value=100, from_unit="F", to_unit="celsius") == "37.7778 celsius"
    assert _call(get_weather, city="Paris") == "Paris: 18 degrees Celsius, light rain"


def _call(t, **kwargs):
    import asyncio

    return asyncio.run(t.ainvoke(kwargs))


@pytest.fixture(scope="module")
def tools_run(tmp_path_factory):
    return evals.run("tools", out=tmp_path_factory.mktemp("tools"), warmup=0, report=False,
                     options={"cases": "calc-product,weather-paris,none-greeting", "output_tokens": 64},
                     engine={"num_kv_blocks": 128})


def test_tools_run_scores_each_unforced_reply(tools_run):
    (name, s), = tools_run.variants.items()
    recs = tools_run.results[0].records
    assert name == "base" and [r["case_id"] for r in sorted(recs, key=lambda r: r["case_id"])] == \
        ["calc-product", "none-greeting", "weather-paris"]
    for r in recs:
        assert r["ok"] and r["tool_choice"] == "auto"
        calls = [(r["called"], r["arguments"], r["call_error"])] if r["num_calls"] else []
        rescored = score_calls(CASES[r["case_id"]], calls, SCHEMAS)
        assert (rescored.picked_right, rescored.schema_valid, rescored.args_match) == \
            (r["picked_right"], r["schema_valid"], r["args_match"])
        assert r["tool_calls"][:1] == ([r["called"]] if r["num_calls"] else [])
    q = s["quality"]
    assert (q["tool_prompts"], q["no_tool_prompts"]) == (2, 1)
    tool_recs = [r for r in recs if r["expected_tool"]]
    assert q["pick_rate"] == sum(r["picked_right"] for r in tool_recs) / 2
    assert q["valid_args_rate"] == sum(r["args_match"] for r in tool_recs) / 2
    assert q["no_call_rate"] == sum(r["num_calls"] == 0 for r in tool_recs) / 2
    assert tools_run.summary["quality"]["base"] == q
