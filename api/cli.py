"""The ``loom`` command line: one typer app that mounts each package's commands.

Each package owns its sub-commands in its own ``cli.py`` (``runtime.cli`` for
``model`` and ``bench``, ``retrieval.cli`` for ``ingest`` and ``search``, ...);
this module only assembles them, so ``loom --help`` stays fast (heavy imports
such as torch happen inside the commands).
"""

from __future__ import annotations

import importlib
import logging
import sys

import typer

app = typer.Typer(
    name="loom",
    help="Loom: agentic RAG inference orchestration (engine, retrieval, memory, tools, API, evals).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Loom: agentic RAG inference orchestration."""


@app.command()
def version() -> None:
    """Print Loom's version."""
    from importlib.metadata import version as _v

    typer.echo(_v("loom"))


# (module, attribute, name): sub-apps (typer.Typer) or single commands (callables).
_SUBAPPS = [
    ("runtime.cli", "model_app", "model"),
    ("runtime.cli", "bench_app", "bench"),
    ("evals.cli", "eval_app", "eval"),
    ("api.keys_cli", "keys_app", "keys"),
]
_COMMANDS = [
    ("retrieval.cli", "ingest", "ingest"),
    ("retrieval.cli", "search", "search"),
    ("api.serve_cli", "serve", "serve"),
    ("evals.chat_cli", "chat", "chat"),
    ("evals.demo", "demo", "demo"),
]


_mounted = False


def _mount() -> None:
    global _mounted
    if _mounted:
        return
    _mounted = True
    for module, attr, name in _SUBAPPS:
        try:
            sub = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        app.add_typer(sub, name=name)
    for module, attr, name in _COMMANDS:
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        app.command(name=name)(fn)


def main() -> None:
    """Entry point of the ``loom`` console script; errors print as one line."""
    from runtime.errors import LoomError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # bm25s sets its own logger to DEBUG at import; keep the CLI quiet.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    _mount()
    try:
        app()
    except LoomError as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
