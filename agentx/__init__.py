"""agentx: replay agentic LLM traces through a four-stage hardware cost model.

The Python API (docs/api.md) — ``read_trace``, ``replay``, ``simulate``, ``compare`` and the
``Run`` they return — is loaded on first use, so ``import agentx`` and ``agentx --help``
stay fast.
"""

__version__ = "0.1.0"

_API = ("read_trace", "replay", "simulate", "compare", "Run")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("agentx.api"), name)
    raise AttributeError(f"module 'agentx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
