"""The ``loom`` command line: one typer app that mounts each package's commands.

Each package owns its sub-commands in its own ``cli.py`` (``loom.runtime.cli`` for
``model`` and ``bench``, ``loom.retrieval.cli`` for ``ingest`` and ``search``, ...);
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
    from loom.version import loom_version

    typer.echo(loom_version())


# (module, attribute, name): sub-apps (typer.Typer) or single commands (callables).
_SUBAPPS = [
    ("loom.runtime.cli", "model_app", "model"),
    ("loom.runtime.cli", "bench_app", "bench"),
    ("loom.evals.cli", "eval_app", "eval"),
    ("loom.api.keys_cli", "keys_app", "keys"),
]
_COMMANDS = [
    ("loom.retrieval.cli", "ingest", "ingest"),
    ("loom.retrieval.cli", "search", "search"),
    ("loom.api.serve_cli", "serve", "serve"),
    ("loom.evals.chat_cli", "chat", "chat"),
    ("loom.evals.demo", "demo", "demo"),
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
    """Entry point of the ``loom`` console script; errors print as one line.

    A usage error (a flag's value of the wrong type, an unknown flag) is one
    ``error:`` line naming the flag and exit code 2, as a ``LoomError`` is; the
    help screens stay typer's.
    """
    from loom.runtime.errors import LoomError

    try:
        from typer._click import exceptions as click  # typer >= 0.24 vendors click
    except ImportError:  # pragma: no cover - older typer runs on click itself
        from click import exceptions as click

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # bm25s sets its own logger to DEBUG at import; keep the CLI quiet.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    _mount()
    try:
        code = app(standalone_mode=False)
    except click.NoArgsIsHelpError as exc:  # `loom` or `loom keys` alone: the help screen
        help_text = exc.ctx.get_help() if exc.ctx is not None else ""
        if help_text:  # typer's rich help prints itself and returns ""
            typer.echo(help_text)
        return
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "loom"
        typer.secho(f"error: {exc.format_message()} (see {command} --help)", fg="red", err=True)
        sys.exit(2)
    except click.Abort:
        sys.exit(1)
    except LoomError as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
