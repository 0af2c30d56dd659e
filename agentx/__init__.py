"""agentx: replay agentic LLM traces through a four-stage hardware cost model.

The Python API (docs/api.md) — ``read_trace``, ``replay``, ``simulate``, ``compare`` and the
``Run`` they return — is loaded on first use, so ``import agentx`` and ``agentx --help``
stay fast.
"""

import os as _os

__version__ = "0.1.0"

# numba's parallel kernels (pricing, the KV geometry) run on OpenMP, whose idle threads spin
# after each parallel region unless told to sleep: on a 2-core machine the spin takes the core
# the calls.parquet writer and polars' reader need. Sleeping instead: a 10 M-call replay's CPU
# 10.5 s instead of 11.2 s, wall 7.6 s instead of 8.5 s (medians of five alternating runs).
# Set before libgomp loads (it reads the variable once); a user's own setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_API = ("read_trace", "replay", "simulate", "compare", "Run")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("agentx.api"), name)
    raise AttributeError(f"module 'agentx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
