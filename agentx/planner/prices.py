"""Default $ per GPU-hour per system (``prices.toml``, each with its source)."""

from __future__ import annotations

import functools
import importlib.resources
import tomllib


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, dict]:
    data = importlib.resources.files("agentx.planner").joinpath("prices.toml").read_bytes()
    return tomllib.loads(data.decode("utf-8"))["prices"]


def default_price(system: str) -> tuple[float | None, str | None]:
    """(USD per GPU-hour, source) for ``system``, or (None, None) where none is published."""
    row = _table().get(system)
    return (float(row["usd_per_gpu_hour"]), row["source"]) if row else (None, None)
