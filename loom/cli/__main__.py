"""``python -m loom.cli``: the ``loom`` command, for environments without the console script."""

from loom.cli import main

main()
