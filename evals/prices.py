"""Price table for eval costs: API-style token prices plus a GPU-second price.

TOML (read with :mod:`tomllib`), every key optional::

    # USD per million tokens
    input = 1.0
    cached_input = 0.1
    output = 4.0
    reasoning = 4.0      # default: output (the APIs bill reasoning as output)
    tool_call = 4.0      # default: output
    # USD per accelerator-second, and the accelerator that price rents
    gpu_second = 0.000556
    gpu_name = "H100"

Token cost of a class = cached * cached_input + computed * input (prompt
classes) or tokens * its output price (output classes).  GPU cost: the run's
wall time times ``gpu_second`` (what renting the device costs), shared among
classes in proportion to their attributed milliseconds (attributed times of
concurrent requests overlap, so they are weights, not device time).
A run on the CPU has no GPU bill: its GPU cost is what the same wall time
would cost on ``gpu_name``, and :func:`gpu_cost_label` says so.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject

OUTPUT_PRICE_KEYS = {"reasoning": "reasoning", "tool_call": "tool_call", "output": "output"}


@dataclass(frozen=True)
class Prices:
    """USD per million tokens (``input`` ... ``tool_call``) and per GPU-second of ``gpu_name``."""

    input: float = 1.0
    cached_input: float = 0.1
    output: float = 4.0
    reasoning: float | None = None
    tool_call: float | None = None
    gpu_second: float = 2.0 / 3600.0
    gpu_name: str = "H100"

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_name, str) or not self.gpu_name.strip():
            raise ValueError(f"prices.gpu_name: must be a non-empty string, got {self.gpu_name!r}")
        for f in fields(self):
            if f.name == "gpu_name":
                continue
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"prices.{f.name}: must be a number >= 0, got {value!r}")

    def output_price(self, cls: str) -> float:
        """USD per million tokens of output class ``cls`` (reasoning/tool_call default to output)."""
        if cls == "reasoning" and self.reasoning is not None:
            return self.reasoning
        if cls == "tool_call" and self.tool_call is not None:
            return self.tool_call
        return self.output

    def prompt_cost(self, cached: int, computed: int) -> float:
        """USD for ``cached`` and ``computed`` prompt tokens."""
        return (cached * self.cached_input + computed * self.input) / 1e6

    def output_cost(self, cls: str, tokens: int) -> float:
        """USD for ``tokens`` of output class ``cls``."""
        return tokens * self.output_price(cls) / 1e6

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["reasoning"] = self.output_price("reasoning")
        d["tool_call"] = self.output_price("tool_call")
        return d

    def ledger_prices(self) -> Any:
        """The orchestrator's ``PriceTable`` with the same token prices (GPU priced here, not there)."""
        from loom.orchestrator.ledger import PriceTable

        return PriceTable(input=self.input, cached_input=self.cached_input, output=self.output, gpu_second=0.0)


def load_prices(path: str | Path | None) -> Prices:
    """Prices from a TOML file (``None``: defaults).

    Raises:
        FileNotFoundError: no such file. ValueError: bad TOML, an unknown key
        or a negative price (naming the key).
    """
    if path is None:
        return Prices()
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"prices: {path} is not valid TOML: {exc}") from exc
    gpu = data.pop("gpu", {})
    if not isinstance(gpu, dict):
        raise ValueError(f"prices: [gpu] must be a table (second, name) in {path}, got {gpu!r}")
    gpu = {("gpu_" + k if k in ("second", "name") else k): v for k, v in gpu.items()}
    data = {**data.pop("tokens", {}), **gpu, **data}
    known = {f.name for f in fields(Prices)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"prices: unknown key(s) {unknown} in {path}; known: {sorted(known)}")
    return Prices(**data)


def gpu_cost_label(prices: Prices, device: str | None) -> str:
    """How the report names GPU cost for a run on ``device``.

    Args:
        device: the torch device type the run used (``"cuda"``, ``"cpu"``,
            ``"mps"``), ``None`` when the target does not show it (an HTTP server).

    Returns:
        ``"<gpu_name> at X.XX USD/h"`` on a CUDA run; otherwise the figure is a
        what-if, and the label says so: ``"hypothetical: priced as if on H100 at
        2.00 USD/h (this run was on CPU)"``.
    """
    rate = f"{prices.gpu_name} at {prices.gpu_second * 3600:.2f} USD/h"
    if device == "cuda":
        return rate
    if device is None:
        return f"priced as if on {rate} (the target's device is not known)"
    return f"hypothetical: priced as if on {rate} (this run was on {device.upper()})"
