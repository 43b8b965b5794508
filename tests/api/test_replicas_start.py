"""``loom serve --replicas 2`` that cannot work fails its start in one ``error:`` line, before Ray starts.

A module of its own: next to ``test_replicas.py``'s running cluster these starts waited on its CPU.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.api.server import REPO, _env


@pytest.mark.parametrize(("args", "named"), [
    (["--model", "no-such-model"], "no-such-model"),
    (["--tensor-parallel-size", "2"], "tensor_parallel_size"),  # SmolLM2's 9 heads: checked before Ray starts
])
def test_a_start_that_cannot_work_fails_in_one_line(tmp_path, real_model, args, named):
    proc = subprocess.run([sys.executable, "-m", "loom.cli", "serve", "--replicas", "2", *args,
                           "--db", f"sqlite:///{tmp_path / 'x.db'}", "--no-auth"], check=False, cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and named in errors[0] and "Traceback" not in proc.stderr
