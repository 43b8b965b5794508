"""The token-class ledger: tokens, time and cost of every model call split by class.

Prompt classes (``system, tools, memory, history, retrieval, tool_result,
user``, and ``query_rewrite`` for the whole prompt of a condense-question call,
:mod:`loom.orchestrator.condense`) are each split into cached and computed tokens *exactly*: the context
builder knows every segment's token span ``[start, end)`` and the runtime
reports ``num_cached_tokens``, the number of leading prompt tokens served from
the prefix cache, so token ``i`` is cached iff ``i < num_cached_tokens``.

Time: prefill time (``first_token_time - arrival_time``, ms; it includes queue
wait, as TTFT does) is attributed to the *computed* prompt tokens of each class
in proportion to their count; decode time of output token ``i >= 1`` is
``token_times[i] - token_times[i-1]`` and goes to that token's class
(``reasoning``, ``tool_call``, ``output``, or ``rewritten_query`` for the
tokens of a condense-question call).  ``spec_rejected`` counts drafted
tokens that the verifier discarded (not part of the completion).
``recompute`` is the work a preemption caused: each time the engine preempts a
request and admits it again, it looks up the request's prompt *and* output so
far again (some of it served by the prefix cache, the rest computed again).
Those tokens are not part of the prompt; the line carries them (cached and
computed, priced as input) so that, over any run, prompt tokens + recompute
tokens equal the engine's ``prefix_cache_queries`` and cached prompt tokens +
recompute cached tokens its ``prefix_cache_hits``, preemption included.  Their
time lies inside the decode gaps of the output tokens, where it is counted.
``prompt_misses`` says why the computed prompt tokens were not served from
the cache (``RequestOutput.kv_miss_tokens``): ``evicted`` (their blocks were
cached once and evicted), ``expired`` (evicted after a retention pin ran out)
or ``new`` (never cached as a full block).  Its values sum to the computed
prompt tokens.  ``tier_tokens`` are the cached prompt tokens that came from the
disk tier (``loom.runtime.kv_tier``) rather than the pool.
``budget_cut`` counts, per prompt class, tokens of content the context
budget left out of the prompt (a retrieved chunk cut at a sentence boundary or
dropped: :meth:`loom.orchestrator.context.ContextBuilder.fit_retrieval`); they are
not part of the prompt and are recorded on the first call of the turn.

Cost comes from a :class:`PriceTable` (API-style USD per million tokens: input,
cached input, output; reasoning and tool calls are billed as output) plus an
optional price per accelerator-second of attributed time.

Invariant (tested): the classes sum exactly to the call's totals, and a run's
ledger is the class-wise sum of its calls.  Usage maps onto OpenAI's
(``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``)
and LangChain's (``input_token_details.cache_read``, ``output_token_details.reasoning``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from loom.json_types import JSONObject

if TYPE_CHECKING:
    from langchain_core.messages.ai import UsageMetadata

PROMPT_CLASSES = ("system", "tools", "memory", "history", "retrieval", "tool_result", "user", "query_rewrite")
OUTPUT_CLASSES = ("reasoning", "tool_call", "output", "rewritten_query")
SPEC_REJECTED = "spec_rejected"


@dataclass(frozen=True)
class PriceTable:
    """USD prices. Token prices are per million tokens; ``gpu_second`` per second."""

    input: float = 1.0
    cached_input: float = 0.1
    output: float = 4.0
    gpu_second: float = 0.0


@dataclass
class PromptClassUsage:
    """One prompt class of one call (or summed over a run). Times in ms, cost in USD."""

    cached_tokens: int = 0
    computed_tokens: int = 0
    prefill_ms: float = 0.0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.cached_tokens + self.computed_tokens


@dataclass
class OutputClassUsage:
    """One output class of one call (or summed over a run). Times in ms, cost in USD."""

    tokens: int = 0
    decode_ms: float = 0.0
    cost: float = 0.0


@dataclass
class Ledger:
    """Class-split usage of one model call or, via :meth:`sum`, of many."""

    prompt: dict[str, PromptClassUsage] = field(default_factory=lambda: {c: PromptClassUsage() for c in PROMPT_CLASSES})
    output: dict[str, OutputClassUsage] = field(default_factory=lambda: {c: OutputClassUsage() for c in OUTPUT_CLASSES})
    spec_rejected: int = 0
    recompute: PromptClassUsage = field(default_factory=PromptClassUsage)
    prompt_misses: dict[str, int] = field(default_factory=dict)
    tier_tokens: int = 0
    budget_cut: dict[str, int] = field(default_factory=dict)
    num_calls: int = 0
    ttft_ms: float = 0.0
    e2e_ms: float = 0.0
    calls: list["Ledger"] = field(default_factory=list)

    # -- totals ------------------------------------------------------------
    @property
    def prompt_tokens(self) -> int:
        return sum(u.tokens for u in self.prompt.values())

    @property
    def cached_tokens(self) -> int:
        return sum(u.cached_tokens for u in self.prompt.values())

    @property
    def completion_tokens(self) -> int:
        return sum(u.tokens for u in self.output.values())

    @property
    def reasoning_tokens(self) -> int:
        return self.output["reasoning"].tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> float:
        return (sum(u.cost for u in self.prompt.values()) + sum(u.cost for u in self.output.values())
                + self.recompute.cost)

    @property
    def lookup_tokens(self) -> int:
        """Tokens the engine looked up in its prefix cache: prompt + recompute (its ``prefix_cache_queries``)."""
        return self.prompt_tokens + self.recompute.tokens

    @property
    def lookup_hit_tokens(self) -> int:
        """Of ``lookup_tokens``, those the cache served (the engine's ``prefix_cache_hits``)."""
        return self.cached_tokens + self.recompute.cached_tokens

    @property
    def cache_hit_rate(self) -> float:
        """cached prompt tokens / prompt tokens (0.0 for an empty ledger)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    # -- construction -----------------------------------------------------
    @classmethod
    def for_call(
        cls,
        spans: Sequence[tuple[str, int, int]],
        num_cached_tokens: int,
        output_classes: Sequence[str],
        *,
        arrival_time: float | None = None,
        first_token_time: float | None = None,
        token_times: Sequence[float] = (),
        finish_time: float | None = None,
        spec_rejected: int = 0,
        recompute_tokens: int = 0,
        recompute_cached_tokens: int = 0,
        prompt_misses: dict[str, int] | None = None,
        tier_tokens: int = 0,
        prices: PriceTable | None = None,
    ) -> "Ledger":
        """Ledger of one call.

        Args:
            spans: ``(class, start, end)`` token spans covering the prompt once,
                in order (``end`` exclusive).
            num_cached_tokens: leading prompt tokens served from the prefix cache.
            output_classes: one class per generated token (``reasoning``,
                ``tool_call`` or ``output``).
            arrival_time, first_token_time, token_times, finish_time:
                ``time.monotonic()`` seconds as in ``RequestOutput``.
            spec_rejected: drafted tokens the verifier rejected.
            recompute_tokens / recompute_cached_tokens: tokens looked up again
                after preemptions and how many the cache served
                (``RequestOutput.num_recompute_tokens`` / ``..._cached_tokens``).
            prompt_misses: computed prompt tokens by cause (``RequestOutput.kv_miss_tokens``).
            tier_tokens: of the cached prompt tokens, those loaded from the disk tier.
            prices: price table (default :class:`PriceTable`).

        Raises:
            ValueError: an unknown class, or spans that do not tile ``[0, n)``.
        """
        prices = prices or PriceTable()
        led = cls(num_calls=1, spec_rejected=spec_rejected, prompt_misses=dict(prompt_misses or {}),
                  tier_tokens=tier_tokens)
        led.recompute = PromptClassUsage(cached_tokens=recompute_cached_tokens,
                                         computed_tokens=recompute_tokens - recompute_cached_tokens)
        pos = 0
        for name, start, end in spans:
            if name not in led.prompt:
                raise ValueError(f"spans: unknown prompt class {name!r}")
            if start != pos or end < start:
                raise ValueError(f"spans: span ({name}, {start}, {end}) does not continue at {pos}")
            cached = max(0, min(end, num_cached_tokens) - start)
            led.prompt[name].cached_tokens += cached
            led.prompt[name].computed_tokens += (end - start) - cached
            pos = end
        if arrival_time is not None and first_token_time is not None:
            led.ttft_ms = (first_token_time - arrival_time) * 1000.0
            computed = sum(u.computed_tokens for u in led.prompt.values())
            for u in led.prompt.values():
                u.prefill_ms = led.ttft_ms * u.computed_tokens / computed if computed else 0.0
        for i, name in enumerate(output_classes):
            if name not in led.output:
                raise ValueError(f"output_classes: unknown output class {name!r}")
            led.output[name].tokens += 1
            if 0 < i < len(token_times):
                led.output[name].decode_ms += (token_times[i] - token_times[i - 1]) * 1000.0
        if arrival_time is not None and finish_time is not None:
            led.e2e_ms = (finish_time - arrival_time) * 1000.0
        led._price(prices)
        return led

    def _price(self, prices: PriceTable) -> None:
        per_ms = prices.gpu_second / 1000.0
        for u in (*self.prompt.values(), self.recompute):
            u.cost = (u.cached_tokens * prices.cached_input + u.computed_tokens * prices.input) / 1e6 \
                + u.prefill_ms * per_ms
        for o in self.output.values():
            o.cost = o.tokens * prices.output / 1e6 + o.decode_ms * per_ms

    @classmethod
    def sum(cls, ledgers: Iterable["Ledger"]) -> "Ledger":
        """Class-wise sum; ``calls`` holds the per-call ledgers (flattened)."""
        out = cls()
        for led in ledgers:
            for name, u in led.prompt.items():
                t = out.prompt[name]
                t.cached_tokens += u.cached_tokens
                t.computed_tokens += u.computed_tokens
                t.prefill_ms += u.prefill_ms
                t.cost += u.cost
            for name, o in led.output.items():
                t2 = out.output[name]
                t2.tokens += o.tokens
                t2.decode_ms += o.decode_ms
                t2.cost += o.cost
            out.spec_rejected += led.spec_rejected
            out.recompute.cached_tokens += led.recompute.cached_tokens
            out.recompute.computed_tokens += led.recompute.computed_tokens
            out.recompute.cost += led.recompute.cost
            for name, n in led.budget_cut.items():
                out.budget_cut[name] = out.budget_cut.get(name, 0) + n
            for name, n in led.prompt_misses.items():
                out.prompt_misses[name] = out.prompt_misses.get(name, 0) + n
            out.tier_tokens += led.tier_tokens
            out.num_calls += led.num_calls
            out.ttft_ms += led.ttft_ms
            out.e2e_ms += led.e2e_ms
            out.calls.extend(led.calls if led.calls else [led])
        return out

    # -- mappings ---------------------------------------------------------
    def to_openai_usage(self) -> JSONObject:
        """OpenAI ``usage`` object (chat completions)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }

    def to_langchain_usage(self) -> UsageMetadata:
        """langchain-core ``UsageMetadata`` dict."""
        return {
            "input_tokens": self.prompt_tokens,
            "output_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "input_token_details": {"cache_read": self.cached_tokens},
            "output_token_details": {"reasoning": self.reasoning_tokens},
        }

    def to_dict(self, with_calls: bool = False) -> JSONObject:
        """Plain dict of every class plus totals (JSON-serialisable)."""
        d: JSONObject = {
            "prompt": {k: {**asdict(v), "tokens": v.tokens} for k, v in self.prompt.items()},
            "output": {k: asdict(v) for k, v in self.output.items()},
            SPEC_REJECTED: self.spec_rejected,
            "recompute": {**asdict(self.recompute), "tokens": self.recompute.tokens},
            "budget_cut": dict(self.budget_cut),
            "prompt_misses": dict(self.prompt_misses),
            "tier_tokens": self.tier_tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cache_hit_rate": self.cache_hit_rate,
            "cost": self.cost,
            "num_calls": self.num_calls,
            "ttft_ms": self.ttft_ms,
            "e2e_ms": self.e2e_ms,
        }
        if with_calls:
            d["calls"] = [c.to_dict() for c in self.calls]
        return d
