"""BFCL scores of Loom's runs: per entry by BFCL's own eval runner, per category and mode, and the
leaderboard's summary groupings.

An entry is scored exactly as ``bfcl_eval.eval_checker.eval_runner`` scores
it (Patil et al., Gorilla / Berkeley Function Calling Leaderboard v4): the
AST categories by ``_evaluate_single_ast_entry`` (decode, format check,
``ast_checker``), ``irrelevance`` by ``_evaluate_single_relevance_entry``
(right when no call decodes), ``multi_turn_*`` by
``_evaluate_single_multi_turn_entry`` (every turn's calls executed on BFCL's
API simulators and the state and results compared with the ground truth's).

A call is *schema-valid* when its arguments validate (``jsonschema``) against
the parameter schema of the tool it names, as the model was shown it; a
malformed call or an unknown name is not.

The leaderboard's groupings that these categories fill
(``eval_runner_helper.generate_leaderboard_csv``): *Non-Live AST summary*,
the unweighted mean of Simple, Multiple, Parallel and Parallel Multiple (the
leaderboard's Simple averages Python, Java and JavaScript; here it is Python
only); *Irrelevance* (Hallucination Measurement); *Multi Turn base*.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from loom.json_types import JSONObject

from loom.evals.bfcl_data import CHECKER_MODEL, Entry, checkers
from loom.evals.bfcl_run import EntryRun
from loom.evals.toolcalls import schema_valid

NON_LIVE_AST = ("simple_python", "multiple", "parallel", "parallel_multiple")


def _handler() -> Any:
    b = checkers()
    import types

    return types.SimpleNamespace(decode_ast=b.decode_ast, decode_execute=b.decode_execute)


def check_entry(entry: Entry, run: EntryRun) -> JSONObject:
    """BFCL's verdict on one entry: ``{"valid": bool, "error_type": str | None, "error": ...}``."""
    b, h = checkers(), _handler()
    if run.error is not None and run.result in (None, ""):
        return {"valid": False, "error_type": "loom:error", "error": run.error}
    if entry.category == "irrelevance":
        out = b.evaluate_relevance(h, entry.id, run.result, entry.data, CHECKER_MODEL, entry.category)
    elif entry.multi_turn:
        prompt = {k: v for k, v in entry.data.items() if k != "function"}
        # BFCL keeps simulator instances per (model name, entry): a fresh name per check starts clean
        name = f"{CHECKER_MODEL}_{uuid.uuid4().hex[:8]}"
        out = b.evaluate_multi_turn(h, entry.id, run.result, entry.answer, prompt, name, entry.category)
    else:
        out = b.evaluate_ast(h, entry.id, run.result, entry.answer, entry.data, CHECKER_MODEL, entry.category,
                             b.Language.PYTHON, b.ReturnFormat.PYTHON, False)
    err = out.get("error")
    error_type = out.get("error_type") or (err.get("error_type") if isinstance(err, dict) else None)
    return {"valid": bool(out["valid"]), "error_type": error_type,
            "error": None if out["valid"] else _plain(err)}


def _plain(value: Any) -> Any:
    """JSON-safe copy of a checker's error (it may hold tuples or other objects)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def schema_valid_calls(run: EntryRun) -> int:
    """How many of the run's calls validate against the schema of the tool they name."""
    return sum(1 for name, args, error in run.calls
               if error is None and name in run.schemas and schema_valid(args, run.schemas[name]))


def record(entry: Entry, mode: str, run: EntryRun) -> JSONObject:
    """One JSONL record: the entry, the mode, BFCL's verdict, calls and usage."""
    return {"id": entry.id, "category": entry.category, "mode": mode, **check_entry(entry, run),
            "calls": len(run.calls), "schema_valid_calls": schema_valid_calls(run),
            "invalid_calls": [{"name": n, "arguments": a, "error": e} for n, a, e in run.calls
                              if not (e is None and n in run.schemas and schema_valid(a, run.schemas[n]))],
            "ms": round(run.ms, 1), "prompt_tokens": run.prompt_tokens, "cached_tokens": run.cached_tokens,
            "completion_tokens": run.completion_tokens, "force_quit": run.force_quit, "loom_error": run.error,
            "result": _plain(run.result)}


@dataclass
class CategoryScore:
    """One category in one mode.

    Attributes:
        accuracy: correct / count (BFCL's per-category accuracy), in [0, 1].
        schema_valid_rate: schema-valid calls / calls (``None``: no calls).
        entry_ms: the entries' own wall times, summed (milliseconds).
        wall_ms: wall time of the category's run (entries run ``concurrency`` at a time).
        ms_per_correct: ``wall_ms`` / correct entries (``None``: none correct).
        tokens: prompt, cached (prefix-cache hits among prompt) and completion tokens, summed.
    """

    category: str
    mode: str
    count: int = 0
    correct: int = 0
    calls: int = 0
    schema_valid_calls: int = 0
    entry_ms: float = 0.0
    wall_ms: float = 0.0
    errors: int = 0
    force_quit: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "cached": 0, "completion": 0})

    @property
    def accuracy(self) -> float:
        return self.correct / self.count if self.count else 0.0

    @property
    def schema_valid_rate(self) -> float | None:
        return self.schema_valid_calls / self.calls if self.calls else None

    @property
    def ms_per_correct(self) -> float | None:
        return self.wall_ms / self.correct if self.correct else None

    def add(self, rec: JSONObject) -> None:
        self.count += 1
        self.correct += bool(rec["valid"])
        self.calls += rec["calls"]
        self.schema_valid_calls += rec["schema_valid_calls"]
        self.entry_ms += rec["ms"]
        self.errors += rec["loom_error"] is not None
        self.force_quit += bool(rec["force_quit"])
        for key, field_name in (("prompt", "prompt_tokens"), ("cached", "cached_tokens"),
                                ("completion", "completion_tokens")):
            self.tokens[key] += rec[field_name]

    def to_dict(self) -> JSONObject:
        return {"category": self.category, "mode": self.mode, "accuracy": self.accuracy, "count": self.count,
                "correct": self.correct, "calls": self.calls, "schema_valid_calls": self.schema_valid_calls,
                "schema_valid_rate": self.schema_valid_rate, "ms_per_correct": self.ms_per_correct,
                "wall_ms": round(self.wall_ms, 1), "entry_ms": round(self.entry_ms, 1), "errors": self.errors, "force_quit": self.force_quit,
                "tokens": dict(self.tokens)}


def summarize(records: list[JSONObject], wall_ms: dict[tuple[str, str], float] | None = None) -> list[CategoryScore]:
    """Per (category, mode) scores, in the order the records first name them.

    ``wall_ms``: each (category, mode) run's wall time; missing: the entries' summed times.
    """
    scores: dict[tuple[str, str], CategoryScore] = {}
    for rec in records:
        key = (rec["category"], rec["mode"])
        scores.setdefault(key, CategoryScore(*key)).add(rec)
    for key, score in scores.items():
        score.wall_ms = (wall_ms or {}).get(key, score.entry_ms)
    return list(scores.values())


def groupings(scores: list[CategoryScore]) -> dict[str, JSONObject]:
    """The leaderboard's summary groupings per mode (a grouping is left out when a member is missing)."""
    out: dict[str, JSONObject] = {}
    for mode in dict.fromkeys(s.mode for s in scores):
        acc = {s.category: s.accuracy for s in scores if s.mode == mode}
        groups: JSONObject = {}
        if all(c in acc for c in NON_LIVE_AST):
            groups["non_live_ast_summary"] = sum(acc[c] for c in NON_LIVE_AST) / len(NON_LIVE_AST)
        if "irrelevance" in acc:
            groups["irrelevance"] = acc["irrelevance"]
        if "multi_turn_base" in acc:
            groups["multi_turn_base"] = acc["multi_turn_base"]
        out[mode] = groups
    return out
