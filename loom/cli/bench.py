"""``loom bench``: benchmarks that print figures for Loom next to a peer (e.g. HF transformers) in one run.

Each benchmark lives in its library's package (``loom.runtime.bench.*``,
``loom.evals.bench_sessions``) as one typer-compatible function with its heavy
imports inside; this module only mounts them.  Adding one is one import and one
line below.
"""

from __future__ import annotations

import typer

from loom.evals.bench_agents import agents
from loom.evals.bench_sessions import sessions
from loom.runtime.bench.cpu import cpu
from loom.runtime.bench.cuda import cuda
from loom.runtime.bench.decode import decode
from loom.runtime.bench.overhead import overhead
from loom.runtime.bench.spec import spec
from loom.runtime.bench.throughput import throughput

bench_app = typer.Typer(
    help="Benchmarks that print figures for Loom next to a peer (e.g. HF transformers) in one run.\n\n"
    "Example: loom bench throughput --help",
    no_args_is_help=True,
)

for _name, _fn in (("sessions", sessions), ("agents", agents), ("throughput", throughput), ("spec", spec), ("overhead", overhead),
                   ("decode", decode), ("cpu", cpu), ("cuda", cuda)):
    bench_app.command(_name)(_fn)
