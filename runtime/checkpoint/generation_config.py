"""A model's default sampling parameters: vLLM's ``--generation-config``.

A request that leaves a sampling field unset gets the model's default for it,
as vLLM's OpenAI server does with ``--generation-config auto`` (its default):

* ``"auto"``: the sampling fields of the checkpoint's ``generation_config.json``
  (:data:`SAMPLING_FIELDS`; ``max_new_tokens`` becomes ``max_tokens``). A
  registered model is converted from a GGUF, which carries none of them, so
  the registry's ``RegisteredModel.sampling`` (the upstream
  ``generation_config.json``'s values, or the model card's recommendation)
  fills the fields the file lacks.
* ``"vllm"``: no model defaults (OpenAI's: temperature 1, top_p 1).
* a folder: that folder's ``generation_config.json``.

``do_sample`` is not read (vLLM does not either): ``temperature: 0`` is greedy.
"""

from __future__ import annotations

import json
from pathlib import Path

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""``generation_config.json`` keys that are ``SamplingParams`` fields of the same name."""


def default_sampling(model_path: Path, source: str = "auto") -> dict[str, float | int]:
    """The sampling defaults of the model in ``model_path`` (see the module docstring).

    Returns ``SamplingParams`` keyword arguments (``max_tokens`` in tokens);
    empty when the model has none or ``source`` is ``"vllm"``.

    Raises:
        ValueError: ``source`` is neither ``auto``, ``vllm`` nor a folder; the file
            is not JSON; or a value is out of ``SamplingParams``' range (named).
    """
    from loom.runtime.sampling_params import SamplingParams

    if source == "vllm":
        return {}
    folder = model_path if source == "auto" else Path(source).expanduser()
    if not folder.is_dir():
        raise ValueError(f"generation_config: {source!r} is not 'auto', 'vllm' or a folder")
    out: dict[str, float | int] = {}
    file = folder / "generation_config.json"
    if file.is_file():
        try:
            data = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"generation_config: {file} cannot be read as JSON ({exc})") from None
        out = {k: data[k] for k in SAMPLING_FIELDS if isinstance(data.get(k), int | float)}
        if isinstance(data.get("max_new_tokens"), int):
            out["max_tokens"] = data["max_new_tokens"]
    if source == "auto":
        registered = _registered(model_path)
        if registered is not None:
            out = {**registered, **out}
    try:
        SamplingParams(**out)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"generation_config of {folder}: {exc}") from None
    return out


def _registered(model_path: Path) -> dict[str, float | int] | None:
    """The registry's sampling of the registered model converted into ``model_path``, if it is one."""
    from loom.runtime.checkpoint.registry import REGISTRY, cached_path

    for model in REGISTRY.values():
        if model.sampling and cached_path(model, model_path.parent) == model_path:
            return dict(model.sampling)
    return None
