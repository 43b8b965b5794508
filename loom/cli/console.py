"""Terminal helpers the ``loom`` commands share: :func:`resolve_model` names the model in use
(and warns when its weights are random) or says in one line why it cannot be had,
:func:`model_error` words such a line, :func:`print_error` prints it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

_FIX = "run `loom model pull NAME` for a registered model, or pass a checkpoint folder or a .gguf file"
# the registry's suggestion for a mistyped name: its line is printed as it is
_SUGGESTION = re.compile(r"did you mean [^?;]*\??", re.IGNORECASE)


def model_error(model: str, exc: BaseException) -> str:
    """One line naming ``model``, what went wrong and what to do (no traceback, no repr).

    ``NotFoundError`` from ``loom.runtime.models.loader.resolve_model_path``: not a
    registered name, folder, ``.gguf`` file or reachable hub id (the registry's
    "did you mean ...?" for a near miss is kept word for word).  ``ModelLoadError``:
    a registered model or GGUF file that could not be prepared.  Anything else:
    a folder the engine could not read (no ``config.json``, no weights, ...).
    """
    from loom.runtime.errors import ModelLoadError, NotFoundError

    reason = _first_line(exc)
    if _SUGGESTION.search(reason) and isinstance(exc, (NotFoundError, ModelLoadError)):
        return reason  # the registry's line, word for word: "unknown model 'x'; did you mean y? (...)"
    not_found = f"model {model!r} not found"
    if isinstance(exc, NotFoundError):
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        if exc.__cause__ is None or offline:  # offline, the hub could only have given a cached id
            return (f"{not_found}: not a registered name (loom model list), a folder, a .gguf file "
                    f"or a cached hub id; {_FIX}")
        return (f"{not_found}: not a registered name (loom model list), folder or .gguf file, and "
                f"the Hugging Face hub could not give it ({_first_line(exc.__cause__)}); {_FIX}, or check the "
                "hub id and the network")
    if isinstance(exc, ModelLoadError):
        return f"model {model!r} could not be prepared: {reason}; run `loom model pull {model}` to retry"
    return (f"model {model!r} cannot be read: {reason}; pass a Hugging Face checkpoint folder (config.json, "
            "tokenizer, *.safetensors), a .gguf file or a registered name (loom model list)")


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    line = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    return line.removeprefix("model: ")


def print_error(line: str) -> None:
    """``error: LINE`` on stderr (red on a terminal), never wrapped: one line to read or to grep."""
    Console(stderr=True, highlight=False).print(f"[red]error:[/] {escape(line)}", soft_wrap=True)


def check_readable(path: Path) -> None:
    """Raise unless ``path`` holds what the engine loads: a ``config.json`` with a ``model_type``
    and weights: ``*.safetensors``, or the GGUF a converted folder names (the same checks the engine
    makes, seconds earlier).

    Raises:
        ValueError: naming the file that is missing or unreadable.
    """
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(f"{path} has no config.json")
    try:
        import json

        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{config} is not readable JSON ({_first_line(exc)})") from None
    if not model_type:
        raise ValueError(f"{config} names no model_type")
    if any(path.glob("*.safetensors")):
        return
    from loom.runtime.checkpoint.gguf import gguf_source

    gguf = gguf_source(path)
    if gguf is None:
        raise ValueError(f"{path} has no *.safetensors weights")
    if not gguf.is_file():
        raise ValueError(f"{path} reads its weights from {gguf}, which is gone")


def resolve_model(console: Console, model: str | None, hint: str = "") -> str:
    """The checkpoint folder for ``model`` (default: Loom's default model); print which model runs.

    ``model`` is anything ``loom.runtime.models.loader.resolve_model_path`` accepts.
    A ``random:ARCH-PRESET`` model gets a yellow panel saying its answers are
    noise (``hint`` is added to it); any other model one line.

    Raises:
        typer.Exit: (code 2) the model cannot be found, prepared or read; the cause and the fix are
            printed in one ``error:`` line on stderr (:func:`model_error`).
    """
    from loom.runtime.checkpoint.registry import default_model
    from loom.runtime.errors import LoomError
    from loom.runtime.models.loader import RANDOM_PREFIX, resolve_model_path

    name = model or default_model()
    try:
        path = resolve_model_path(name)
        check_readable(Path(path))
    except (LoomError, ValueError, OSError) as exc:
        line = f"model {name!r}: {_first_line(exc)}" if name.startswith(RANDOM_PREFIX) else model_error(name, exc)
        print_error(line)
        raise typer.Exit(2) from None
    if name.startswith(RANDOM_PREFIX):
        console.print(Panel(
            f"Model: {name}, a random-weight checkpoint at {path}.\n"
            "Its answers are noise: the point is the engine, the context assembly and the ledger."
            + (f"\n{hint}" if hint else ""), title="model", border_style="yellow"))
    else:
        where = "" if Path(name).expanduser() == Path(path) else f" [dim]{escape(str(path))}[/]"
        console.print(f"Model: [bold]{escape(name)}[/]{where}", soft_wrap=True)
    return str(path)


QUANTIZATION_OPTION = typer.Option(
    "auto", "--quantization", "-q", help="Weight format: auto (a registered model's own on CPU, "
    "loom model list; a folder loads as is), int8, int4 or none (float32).")
