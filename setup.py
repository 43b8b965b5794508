"""Install the root folders as one namespace: ``runtime/`` is ``loom.runtime``, and so on.

The design keeps ``runtime/``, ``orchestrator/``, ``retrieval/``, ``memory/``,
``tools/``, ``api/`` and ``evals/`` at the repository root; users import them
as ``loom.runtime``, ``loom.orchestrator``, ...  setuptools maps each folder to
its package (``package_dir``), so the wheel holds ``loom/`` and nothing else at
its top level.  All other metadata lives in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = ("runtime", "orchestrator", "retrieval", "memory", "tools", "api", "evals")

setup(
    packages=[*find_packages(include=["loom", "loom.*"]),
              *(f"loom.{p}" for p in find_packages(include=[*FOLDERS, *(f"{f}.*" for f in FOLDERS)]))],
    package_dir={"loom": "loom", **{f"loom.{f}": f for f in FOLDERS}},
)
