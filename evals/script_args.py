"""What the ``python -m loom.evals.<name> --model M`` scripts share: their arguments and their JSON output."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any


def model_script_parser(prog: str, description: str, default_model: str) -> argparse.ArgumentParser:
    """A parser with ``--model`` (default ``default_model``), ``--threads`` (torch threads, 2) and ``--json``
    (where the records go)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default=default_model, help="any model Loom loads")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--json", type=Path, default=None, help="write the records here")
    return parser


def write_records(path: Path | None, summary: dict[str, Any], records: Sequence[Any]) -> None:
    """``{"summary", "records"}`` (dataclass records) as JSON at ``path``; nothing when ``path`` is ``None``."""
    if path is not None:
        path.write_text(json.dumps({"summary": summary, "records": [asdict(r) for r in records]}, indent=1))
