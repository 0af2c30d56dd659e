"""The four-stage cost model (SEED-1, 8-11) and trace replay.

``make_config`` builds a serving configuration, ``fill_cost`` / ``decode_attention_step`` /
``decode_experts_step`` are the vectorized closed forms, ``call_costs`` prices whole trace
columns, and ``replay_trace`` turns a trace into per-call, per-stage and footprint tables.
Imports are lazy so that ``agentx.replay.footprint`` stays importable on its own.
"""

from __future__ import annotations

_EXPORTS = {
    "make_config": "agentx.replay.config",
    "default_efficiencies": "agentx.replay.config",
    "fill_cost": "agentx.replay.stages",
    "decode_attention_step": "agentx.replay.stages",
    "decode_attention_calls": "agentx.replay.stages",
    "decode_experts_step": "agentx.replay.stages",
    "call_costs": "agentx.replay.stages",
    "STAGES": "agentx.replay.stages",
    "replay_trace": "agentx.replay.replay",
    "ReplayResult": "agentx.replay.replay",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'agentx.replay' has no attribute {name!r}")


class _CallableModule(__import__("types").ModuleType):
    """``agentx.replay(trace, hw=…)`` is the Python API's replay (``agentx.api.replay``) even
    after this package is imported, which binds the name ``agentx.replay`` to the package."""

    def __call__(self, *args, **kwargs):
        from agentx.api import replay

        return replay(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
