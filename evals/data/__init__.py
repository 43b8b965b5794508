"""Data files of the evals: ``qa_stdlib.json`` (the ``qa`` suite's questions, see
:mod:`loom.evals.qa`) and ``tool_prompts.json`` (the ``tools`` suite's prompts, see
:mod:`loom.evals.toolcalls`)."""
