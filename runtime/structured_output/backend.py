"""Grammar backend: compile ``StructuredOutputParams`` with llguidance.

llguidance (guidance-ai, the engine behind OpenAI-style structured outputs in
vLLM and SGLang) turns a JSON schema, regex or Lark grammar into an Earley
parser over a lexer, and computes the allowed-token mask of a BPE vocabulary
in tens of microseconds.  ``GrammarBackend`` holds the llguidance view of the
model's tokenizer (built once, ~1 s), compiles each spec once (an LRU cache
keyed by ``StructuredOutputParams.key()``), validates it at submission so a bad
schema is a ``ValueError`` before the request joins the batch, and creates one
``GrammarMatcher`` per request.

JSON is compiled without flexible whitespace (compact ``{"a":1}``): a model,
and above all a random-weight one, could otherwise spend its whole token
budget on whitespace.  A schema may override this with ``x-guidance``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.hf

from loom.json_types import JSONObject
from loom.runtime.structured_output.bitmask import allocate_bitmask
from loom.runtime.structured_output.matcher import GrammarError, GrammarMatcher

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a stub-only TypedDict
from loom.runtime.structured_output.params import StructuredOutputParams

log = logging.getLogger(__name__)

_JSON_DEFAULTS: JsonCompileOptions = {"whitespace_flexible": False}
_ANY_OBJECT: JSONObject = {"type": "object"}


@dataclass(frozen=True)
class CompiledGrammar:
    """A validated llguidance grammar (its serialized form) and its cache key."""

    key: str
    grammar: str


class GrammarBackend:
    """Compiles specs and creates matchers for one tokenizer.

    Args:
        tokenizer: the model's HF ``PreTrainedTokenizerFast``.
        vocab_size: the model's logits width (may exceed the tokenizer's
            vocabulary; the extra ids are never allowed).
        eos_token_ids: ids that end a constrained output (default: the
            tokenizer's EOS).
        cache_size: compiled grammars kept (LRU).
    """

    def __init__(self, tokenizer: Any, vocab_size: int | None = None,
                 eos_token_ids: list[int] | None = None, cache_size: int = 256) -> None:
        if eos_token_ids is None:
            eos_token_ids = [tokenizer.eos_token_id]
        self.vocab_size = vocab_size or len(tokenizer)
        self.eos_token_ids = list(eos_token_ids)
        self.ll_tokenizer = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=self.vocab_size, eos_token=self.eos_token_ids)
        self._cache: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.cache_hits = 0
        self.cache_misses = 0

    def compile(self, params: StructuredOutputParams) -> CompiledGrammar:
        """Compile and validate ``params`` (cached by spec).

        Raises:
            ValueError: the schema / regex / grammar cannot be compiled; the
                message names the field and quotes llguidance's error.
        """
        key = params.key()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return hit
        grammar = self._to_grammar(params)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            grammar, self.ll_tokenizer)
        if is_error:
            raise ValueError(f"structured_output.{params.kind}: cannot compile: {_one_line(messages[0])}")
        for warning in messages:
            log.warning("structured_output.%s: %s", params.kind, warning)
        compiled = CompiledGrammar(key=key, grammar=grammar)
        with self._lock:
            self.cache_misses += 1
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled

    @staticmethod
    def _to_grammar(params: StructuredOutputParams) -> str:
        kind = params.kind
        try:
            if params.json is not None:
                return llguidance.LLMatcher.grammar_from_json_schema(
                    params.json, defaults=_JSON_DEFAULTS)
            if params.regex is not None:
                return llguidance.LLMatcher.grammar_from_regex(params.regex)
            if params.grammar is not None:
                return llguidance.LLMatcher.grammar_from_lark(params.grammar)
            return llguidance.LLMatcher.grammar_from_json_schema(
                _ANY_OBJECT, defaults=_JSON_DEFAULTS)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"structured_output.{kind}: cannot compile: {_one_line(str(exc))}") from exc

    def matcher(self, compiled: CompiledGrammar) -> GrammarMatcher:
        """A fresh per-request matcher at the start of the grammar.

        The first position's mask is computed here once, so a constraint that
        compiles but admits no output at all (a JSON schema that only refers
        to itself, ``{"$ref": "#"}``) fails at submission, not in a batch.

        Raises:
            ValueError: the matcher cannot start (one line, no grammar internals).
        """
        ll = llguidance.LLMatcher(self.ll_tokenizer, compiled.grammar, log_level=0)
        try:
            matcher = GrammarMatcher(ll, self.eos_token_ids)
            matcher.fill_bitmask(allocate_bitmask(1, self.vocab_size), 0)
        except GrammarError as exc:
            raise ValueError(f"structured_output: the constraint admits no output ({exc})") from None
        return matcher


def _one_line(message: str, limit: int = 200) -> str:
    """One line of llguidance's message, cut to ``limit`` characters (no state dumps).

    Multi-line messages (a regex parse error: a header, the pattern, a caret,
    then ``error: <reason>``) give their last ``error:`` line, the one that
    says why; others their first line.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()] or ["invalid"]
    reasons = [line for line in lines if line.lower().startswith("error:")]
    line = f"{lines[0]} {reasons[-1]}" if reasons and reasons[-1] != lines[0] else lines[0]
    return line if len(line) <= limit else line[:limit] + "..."
