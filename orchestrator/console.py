"""Terminal helpers every ``loom`` front-end shares (``loom serve``, ``loom chat``, ``loom demo``):
:func:`resolve_model` names the model in use (and warns when its weights are
random), :func:`quiet_logs` keeps library logs out of streamed answers.

The front-ends themselves (the demo, the chat loop, the sessions bench and
the printing of agent turns) live at the edge, in ``evals/``.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel


def quiet_logs() -> None:
    """Keep library INFO logs and transformers' progress bars out of streamed answers (warnings still show)."""
    import logging

    from transformers.utils import logging as hf_logging

    logging.getLogger().setLevel(logging.WARNING)
    hf_logging.disable_progress_bar()  # the embedder's "Loading weights" bar would cut into streamed text


def resolve_model(console: Console, model: str | None, hint: str = "") -> str:
    """The checkpoint folder for ``model`` (default: Loom's default model); print which model runs.

    ``model`` is anything ``runtime.models.loader.resolve_model_path`` accepts.
    A ``random:ARCH-PRESET`` model gets a yellow panel saying its answers are
    noise (``hint`` is added to it); any other model one line.

    Raises:
        typer.Exit: (code 2) the model cannot be found or prepared; the cause is printed in one line.
    """
    from runtime.checkpoint.registry import DEFAULT_MODEL
    from runtime.errors import LoomError
    from runtime.models.loader import RANDOM_PREFIX, resolve_model_path

    name = model or DEFAULT_MODEL
    try:
        path = resolve_model_path(name)
    except (LoomError, ValueError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if name.startswith(RANDOM_PREFIX):
        console.print(Panel(
            f"Model: {name}, a random-weight checkpoint at {path}.\n"
            "Its answers are noise: the point is the engine, the context assembly and the ledger."
            + (f"\n{hint}" if hint else ""), title="model", border_style="yellow"))
    else:
        console.print(f"Model: [bold]{name}[/] [dim]{path}[/]")
    return str(path)
