"""BFCL v4's test entries, tool schemas and checkers, read from the ``bfcl-eval`` wheel as shipped.

The Berkeley Function Calling Leaderboard (Patil et al., Gorilla; BFCL v4,
https://gorilla.cs.berkeley.edu/leaderboard.html) ships its data
(``bfcl_eval/data/BFCL_v4_<category>.json``, ``possible_answer/``, the
multi-turn function docs) and its checkers inside the ``bfcl-eval`` package.
Nothing here re-implements them: entries, schemas (``convert_to_tool``, the
conversion BFCL applies for OpenAI-compatible function-calling endpoints, so
``.`` in a name becomes ``_``), the AST checker, the multi-turn state checker
and the API simulators are BFCL's own code.

``bfcl-eval`` pins older numpy, faiss-cpu, networkx and filelock than Loom's
environment holds, so it lives in ``.venv-bfcl`` (``make bfcl-env``).  Its
package imports, through ``bfcl_eval.constants.model_config``, every hosted
model's SDK (Anthropic, Cohere, Gemini ... about 10 s); the checkers read one
field of that table, ``underscore_to_dot`` of the model being scored.  Loom is
not in the table, so :func:`checkers` installs a one-row table for it
(:data:`CHECKER_MODEL`: a function-calling model whose names carry ``_`` for
``.``, as ``convert_to_tool`` writes them) before importing the checkers.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from loom.json_types import JSONObject

#: the name Loom's results are checked under (BFCL's ``model_name`` argument)
CHECKER_MODEL = "loom-FC"

#: BFCL categories the adapter runs: single-turn AST, irrelevance and multi-turn base
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "multi_turn_base")


@dataclass(frozen=True)
class CheckerRow:
    """The fields of BFCL's ``ModelConfig`` that its checkers read."""

    model_name: str
    display_name: str
    is_fc_model: bool = True
    underscore_to_dot: bool = True


@lru_cache(maxsize=1)
def checkers() -> types.SimpleNamespace:
    """BFCL's checkers and helpers, imported once.

    Returns a namespace with ``ast_checker``, ``multi_turn_checker``,
    ``execute_multi_turn_func_call``, ``convert_to_tool``,
    ``convert_to_function_call``, ``is_function_calling_format_output``,
    ``is_empty_output``, ``is_empty_execute_response``, ``load_file``,
    ``populate_test_cases_with_predefined_functions``, ``decode_ast`` and
    ``decode_execute`` (BFCL's OpenAI-compatible FC handler's decoders, bound to
    an FC model), the per-entry scoring of BFCL's eval runner
    (``evaluate_ast``, ``evaluate_relevance``, ``evaluate_multi_turn``),
    ``Language``, ``ReturnFormat``,
    ``ModelStyle``, ``GORILLA_TO_OPENAPI``, ``PROMPT_PATH``,
    ``POSSIBLE_ANSWER_PATH``, ``VERSION_PREFIX`` and ``MAXIMUM_STEP_LIMIT``.

    Raises:
        ImportError: ``bfcl_eval`` is not installed (run in ``.venv-bfcl``: ``make bfcl-env``).
    """
    # BFCL writes file locks under its project root (default: site-packages); keep them in a temp folder.
    os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(tempfile.gettempdir(), "loom-bfcl"))
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        import bfcl_eval.constants  # noqa: F401  (the parent package, before its child is set)

        table = types.ModuleType(name)
        table.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: CheckerRow(CHECKER_MODEL, "Loom (FC)")}  # type: ignore[attr-defined]
        sys.modules[name] = table
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
    from bfcl_eval.constants.enums import Language, ModelStyle, ReturnFormat
    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.eval_runner import _evaluate_single_ast_entry as evaluate_ast
    from bfcl_eval.eval_checker.eval_runner import _evaluate_single_multi_turn_entry as evaluate_multi_turn
    from bfcl_eval.eval_checker.eval_runner import _evaluate_single_relevance_entry as evaluate_relevance
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
        is_empty_execute_response,
    )
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
    from bfcl_eval.model_handler.utils import convert_to_function_call, convert_to_tool
    from bfcl_eval.utils import (
        is_empty_output,
        is_function_calling_format_output,
        load_file,
        populate_test_cases_with_predefined_functions,
    )

    fc = types.SimpleNamespace(is_fc_model=True)
    decode_ast = functools.partial(OpenAICompletionsHandler.decode_ast, fc)
    decode_execute = functools.partial(OpenAICompletionsHandler.decode_execute, fc)
    return types.SimpleNamespace(**{k: v for k, v in locals().items()
                                    if k not in ("name", "table", "fc", "OpenAICompletionsHandler")})


@dataclass(frozen=True)
class Entry:
    """One BFCL test entry with its possible answer (``None`` for irrelevance, which has none)."""

    category: str
    id: str
    data: JSONObject
    answer: Any

    @property
    def multi_turn(self) -> bool:
        return self.category.startswith("multi_turn")


def load_entries(category: str, limit: int | None = None) -> list[Entry]:
    """The first ``limit`` entries of ``category`` in the file's order (all when ``None``).

    Multi-turn entries get their function docs from the involved classes
    (``populate_test_cases_with_predefined_functions``, as BFCL's generation step does).

    Raises:
        ValueError: an unknown category.
        ImportError: ``bfcl_eval`` is not installed.
    """
    if category not in CATEGORIES:
        raise ValueError(f"category: one of {', '.join(CATEGORIES)} expected, got {category!r}")
    b = checkers()
    file = f"{b.VERSION_PREFIX}_{category}.json"
    rows = b.load_file(b.PROMPT_PATH / file)[:limit]
    if category.startswith("multi_turn"):
        rows = b.populate_test_cases_with_predefined_functions(rows)
    answers: dict[str, Any] = {}
    if (b.POSSIBLE_ANSWER_PATH / file).exists():
        answers = {a["id"]: a["ground_truth"] for a in b.load_file(b.POSSIBLE_ANSWER_PATH / file)}
    return [Entry(category, r["id"], r, answers.get(r["id"])) for r in rows]


def openai_tools(functions: list[JSONObject]) -> list[JSONObject]:
    """BFCL function docs as OpenAI tools (``convert_to_tool`` with BFCL's OpenAI type mapping)."""
    b = checkers()
    return list(b.convert_to_tool(functions, b.GORILLA_TO_OPENAPI, b.ModelStyle.OPENAI_COMPLETIONS))


def user_text(messages: list[JSONObject]) -> tuple[str, str]:
    """``(system, user)`` text of one BFCL turn: its system and user messages, each joined by newlines."""
    system = "\n".join(str(m["content"]) for m in messages if m.get("role") == "system")
    user = "\n".join(str(m["content"]) for m in messages if m.get("role") != "system")
    return system, user


def call_strings(calls: list[JSONObject]) -> list[str]:
    """BFCL's executable form of FC results ``[{name: arguments_json}]`` (``convert_to_function_call``).

    Raises:
        ValueError: arguments that are not JSON.
    """
    return list(checkers().convert_to_function_call(calls))


def dumps_args(arguments: JSONObject) -> str:
    """Arguments as an OpenAI endpoint returns them: a JSON string."""
    return json.dumps(arguments, ensure_ascii=False)
