"""Quantized weights against float32: perplexity, top-1 agreement and greedy equality.

The text is documentation Loom did not write: the long descriptions
(``METADATA``) of packages installed beside it (:data:`DOC_PACKAGES`; those
missing are skipped), cut into windows of ``window`` tokens after each
description's first ``skip_chars`` characters (past badges and titles).
For each quantization method the same engine settings score (the prefix
cache on: scoring requests never hit it, since ``prompt_logprobs`` computes
its whole prompt, and the greedy ``docs`` prompts, the windows' first
tokens, are then served from it instead of computed a second time):

- **perplexity**: ``exp`` of the mean negative log-likelihood of every
  window token after the first (``SamplingParams.prompt_logprobs``);
- **top-1 agreement**: the fraction of those positions where the method's
  most likely next token equals float32's;
- **greedy equality**: how many of ``num_greedy`` prompts decode
  ``greedy_tokens`` tokens identical to float32's, and where each one first
  differs, on two kinds of prompt: continuing a window's first
  ``greedy_prompt`` tokens of documentation (``docs``), and answering the
  first questions of the ``qa`` suite rendered with the model's chat
  template (``chat``).

``python -m loom.evals.quantization --model smollm2-135m-instruct`` prints
the table; the test suite asserts the bounds the README states.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass, field

DOC_PACKAGES = ("fastapi", "pydantic", "sqlalchemy", "typer", "rich", "httpx", "uvicorn", "jinja2",
                "transformers", "tokenizers", "safetensors", "numpy", "click", "tqdm", "starlette", "huggingface-hub")


@dataclass
class MethodQuality:
    """One method's figures (float32 included, agreeing with itself)."""

    method: str
    perplexity: float
    positions: int
    top1_agreement: float = 1.0
    greedy_equal: dict[str, int] = field(default_factory=dict)
    greedy_total: int = 0
    first_divergence: dict[str, list[int]] = field(default_factory=dict)
    weight_bytes: int = 0


def doc_texts(skip_chars: int = 1000, min_chars: int = 2500) -> list[str]:
    """Long descriptions of the installed :data:`DOC_PACKAGES`, first ``skip_chars`` dropped."""
    texts = []
    for name in DOC_PACKAGES:
        try:
            meta = importlib.metadata.metadata(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        body = meta.get_payload() or meta.get("Description") or ""  # type: ignore[attr-defined]
        if len(body) >= min_chars:
            texts.append(body[skip_chars:])
    return texts


def compare(model: str, methods: tuple[str, ...] = ("int8", "int4"), *, window: int = 384,
            num_windows: int = 12, greedy_prompt: int = 128, greedy_tokens: int = 32, num_greedy: int = 8,
            **engine_args: object) -> list[MethodQuality]:
    """Score float32 and each of ``methods`` on the same documentation windows.

    Args:
        model: any model name or path Loom accepts.
        methods: quantization methods (``EngineConfig.quantization`` values).
        window / num_windows: tokens per scored window, and how many.
        greedy_prompt / greedy_tokens / num_greedy: the greedy-equality check.
        engine_args: more ``EngineConfig`` fields, for every engine.

    Returns:
        float32 first, then one entry per method.

    Raises:
        ValueError: fewer than ``num_windows`` documentation texts are installed.
    """
    from loom.runtime import LLM, SamplingParams
    from loom.runtime.model_runner import ModelRunner
    from loom.runtime.quantization import quantized_bytes

    texts = doc_texts()
    if len(texts) < num_windows:
        raise ValueError(f"num_windows: only {len(texts)} package descriptions are installed")
    from loom.evals.qa import load_questions

    questions = [q.question for q in load_questions()[:num_greedy]]
    results: list[MethodQuality] = []
    reference: tuple[list[int], dict[str, list[list[int]]]] | None = None
    for method in (None, *methods):
        llm = LLM(model, quantization=method, **engine_args)
        windows = [llm.tokenizer(t)["input_ids"][:window] for t in texts[:num_windows]]
        scored = llm.generate(prompt_token_ids=windows, use_tqdm=False,
                              sampling_params=SamplingParams(max_tokens=1, prompt_logprobs=1))
        nll, top1 = [], []
        for out, ids in zip(scored, windows):
            entries = out.prompt_logprobs or []
            for entry, target in zip(entries[1:], ids[1:]):
                assert entry is not None
                nll.append(-entry[target])
                top1.append(max(entry, key=entry.__getitem__))
        chats = [llm.tokenizer(llm.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                                 add_generation_prompt=True),
                               add_special_tokens=False)["input_ids"] for q in questions]
        params = SamplingParams(max_tokens=greedy_tokens, temperature=0.0, ignore_eos=True)
        docs = [w[:greedy_prompt] for w in windows[:num_greedy]]
        outs = [o.token_ids for o in llm.generate(prompt_token_ids=docs + chats, sampling_params=params,
                                                  use_tqdm=False)]  # one batch: both kinds decode together
        greedy = {"docs": outs[:len(docs)], "chat": outs[len(docs):]}
        runner = llm.engine.runner
        assert isinstance(runner, ModelRunner)  # one rank: quantization refuses tensor parallelism
        quality = MethodQuality(method or "float32", math.exp(sum(nll) / len(nll)), len(nll),
                                greedy_total=num_greedy, weight_bytes=quantized_bytes(runner.model))
        if reference is None:
            reference = (top1, greedy)
            quality.greedy_equal = {kind: num_greedy for kind in greedy}
        else:
            quality.top1_agreement = sum(a == b for a, b in zip(top1, reference[0])) / len(top1)
            for kind, outs in greedy.items():
                quality.first_divergence[kind] = [
                    next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), greedy_tokens)
                    for x, y in zip(outs, reference[1][kind])]
                quality.greedy_equal[kind] = sum(d == greedy_tokens for d in quality.first_divergence[kind])
        results.append(quality)
        llm.shutdown()
    return results


def main() -> None:
    """``python -m loom.evals.quantization [--model NAME] [--methods int8,int4]``: print the table."""
    import argparse

    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--methods", default="int8,int4")
    parser.add_argument("--group-size", type=int, default=32)
    args = parser.parse_args()
    results = compare(args.model, tuple(args.methods.split(",")), quantization_group_size=args.group_size)
    base = results[0].perplexity
    table = Table(title=f"{args.model}: quantized against float32 on {results[0].positions} tokens of package docs")
    for col in ("method", "weights MiB", "perplexity", "vs float32", "top-1 agreement", "greedy equal: docs",
                "chat", "first divergence: docs", "chat"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(r.method, f"{r.weight_bytes / 2**20:.0f}", f"{r.perplexity:.3f}",
                      f"{(r.perplexity / base - 1) * 100:+.2f}%", f"{r.top1_agreement:.1%}",
                      *(f"{r.greedy_equal[k]}/{r.greedy_total}" for k in ("docs", "chat")),
                      *(" ".join(map(str, r.first_divergence.get(k, []))) or "-" for k in ("docs", "chat")))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
