"""Rich tables of a :class:`~loom.orchestrator.ledger.Ledger`: tokens, time and cost by class.

Shared by ``make demo`` (``orchestrator.demo``) and ``loom chat``'s ``/usage``.
TTFT and TPOT follow vLLM's benchmark definitions:
TTFT = first token − send; TPOT = (E2EL − TTFT) / (output tokens − 1), here
averaged over the model calls of the ledger that produced at least 2 tokens.
"""

from __future__ import annotations

from rich.table import Table

from loom.orchestrator.ledger import OUTPUT_CLASSES, PROMPT_CLASSES, Ledger


def tpot_ms(ledger: Ledger) -> float | None:
    """Mean time per output token after the first (ms), over the ledger's calls.

    Returns ``None`` when no call produced two or more tokens (TPOT undefined).
    """
    calls = ledger.calls or [ledger]
    decode_ms = sum(c.e2e_ms - c.ttft_ms for c in calls if c.completion_tokens > 1)
    gaps = sum(c.completion_tokens - 1 for c in calls if c.completion_tokens > 1)
    return decode_ms / gaps if gaps else None


def first_ttft_ms(ledger: Ledger) -> float:
    """TTFT of the ledger's first model call (ms): what the user waits for."""
    calls = ledger.calls or [ledger]
    return calls[0].ttft_ms if calls else 0.0


def ledger_table(ledger: Ledger, title: str) -> Table:
    """One row per non-empty token class (cached / computed / ms / USD) plus a total row."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("class", justify="left")
    for col in ("cached", "computed", "ms", "cost $"):
        t.add_column(col, justify="right")
    for name in PROMPT_CLASSES:
        u = ledger.prompt[name]
        if u.tokens:
            t.add_row(name, str(u.cached_tokens), str(u.computed_tokens), f"{u.prefill_ms:.1f}",
                      f"{u.cost:.6f}")
    for name in OUTPUT_CLASSES:
        o = ledger.output[name]
        if o.tokens:
            t.add_row(f"{name} (out)", "", str(o.tokens), f"{o.decode_ms:.1f}", f"{o.cost:.6f}")
    if ledger.spec_rejected:
        t.add_row("spec_rejected", "", str(ledger.spec_rejected), "", "")
    tpot = tpot_ms(ledger)
    t.add_section()
    t.add_row("total", str(ledger.cached_tokens),
              str(ledger.prompt_tokens - ledger.cached_tokens + ledger.completion_tokens),
              f"{ledger.e2e_ms:.1f}", f"{ledger.cost:.6f}")
    t.caption = (f"calls {ledger.num_calls} · TTFT {first_ttft_ms(ledger):.1f} ms · "
                 f"TPOT {'n/a' if tpot is None else f'{tpot:.1f} ms'} · "
                 f"prefix-cache hit rate {ledger.cache_hit_rate:.1%}")
    t.caption_justify = "left"
    return t
