"""The ``loom`` command line: one typer app with every sub-command, and its entry point :func:`main`.

Each sub-command lives in its own module of this package (``model``, ``bench``,
``serve``, ``keys``, ``ingest`` and ``search``, ``eval``, ``chat``, ``demo``) and is
mounted by :func:`build_app` with plain imports: a command that cannot be imported
is an error (one line, like any other), never a silently missing command.  The
modules import heavy libraries (torch, faiss, transformers) inside the commands,
so ``loom --help`` stays fast.

Every failure ends as one ``error: ...`` line on stderr, never a traceback:
a usage error or a ``LoomError`` exits 2, anything unexpected 1, Ctrl-C 130.
``-v`` / ``--verbose`` (anywhere on the line) or ``LOOM_LOG_LEVEL=info`` shows INFO logs
and the traceback of an unexpected error (:mod:`loom.cli.logs`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from loom.cli.logs import configure, is_verbose, split_verbose

app = typer.Typer(
    name="loom",
    help="Loom: agentic RAG inference orchestration (engine, retrieval, memory, tools, API, evals).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="INFO logs and tracebacks (also after the "
                                 "command's name; or LOOM_LOG_LEVEL=info)."),
) -> None:
    """Loom: agentic RAG inference orchestration."""


@app.command()
def version() -> None:
    """Print Loom's version."""
    from loom.version import loom_version

    typer.echo(loom_version())


_mounted = False


def build_app() -> typer.Typer:
    """:data:`app` with every sub-command mounted (imported on the first call; an import error raises)."""
    global _mounted
    if not _mounted:
        from loom.cli.bench import bench_app
        from loom.cli.chat import chat
        from loom.cli.demo import demo
        from loom.cli.eval import eval_app
        from loom.cli.ingest import ingest, search
        from loom.cli.keys import keys_app
        from loom.cli.model import model_app
        from loom.cli.serve import serve

        app.add_typer(model_app, name="model")
        app.add_typer(bench_app, name="bench")
        app.add_typer(eval_app, name="eval")
        app.add_typer(keys_app, name="keys")
        for name, command in (("ingest", ingest), ("search", search), ("serve", serve), ("chat", chat),
                              ("demo", demo)):
            app.command(name=name)(command)
        _mounted = True
    return app


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``loom`` console script: run the command, end every failure as one line.

    Exit codes: 0 done; 1 an unexpected error; 2 a usage error (a flag's value of
    the wrong type, an unknown flag) or an error Loom raises on purpose
    (``LoomError``: a model that cannot be had, an index that does not exist, ...);
    130 interrupted (Ctrl-C).  The help screens stay typer's.
    """
    from typer._click import exceptions as click

    args, verbose = split_verbose(list(sys.argv[1:] if argv is None else argv))
    configure(verbose)
    try:
        code = build_app()(args=args, prog_name="loom", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:  # `loom` or `loom keys` alone: the help screen
        help_text = exc.ctx.get_help() if exc.ctx is not None else ""
        if help_text:  # typer's rich help prints itself and returns ""
            typer.echo(help_text)
        sys.exit(0)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "loom"
        _fail(f"{exc.format_message()} (see {command} --help)", 2)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):  # Ctrl-D at a typer prompt, or Ctrl-C outside a command
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place every error becomes one line
        _fail_unexpected(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(line: str, code: int) -> NoReturn:
    from loom.cli.console import print_error

    print_error(" ".join(line.split()))
    sys.exit(code)


def _fail_unexpected(exc: Exception) -> NoReturn:
    from loom.runtime.errors import LoomError

    if is_verbose():
        import traceback

        traceback.print_exception(exc)
    if isinstance(exc, LoomError):
        _fail(exc.message, 2)
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    _fail(message.splitlines()[0] + ("" if is_verbose() else " (loom -v shows the traceback)"), 1)
