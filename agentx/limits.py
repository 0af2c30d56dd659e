"""Resource limits: inputs past them stop early with one line naming the limit and its knob.

Each limit bounds the memory of a step whose size follows an input value rather than the
machine (a call's tokens become KV blocks, a time series has one row per interval). Defaults
sit far above the real traces (the Weka set's largest call is under 10^6 tokens); an
environment variable raises each one for a machine that can hold more.
"""

from __future__ import annotations

import os

from agentx.errors import AgentxError


class LimitError(AgentxError):
    """An input or option past a resource limit (exit 1; the message says how to raise it)."""


LIMITS = {
    # name: (environment variable, default, what it counts)
    "call_tokens": ("AGENTX_MAX_CALL_TOKENS", 1 << 32, "tokens in one call"),
    # a replay holds about 800 B per call (10^7 one-call sessions passed 7.8 GB RSS): 5 M calls
    # keep it near 4 GB; the real traces hold at most tens of thousands of calls
    "calls": ("AGENTX_MAX_CALLS", 5_000_000, "calls in one trace"),
    # a streamed trace (agentx synth, streamed partition) holds one chunk at a time and checks
    # "calls" per chunk; this bounds only its total, i.e. the disk it fills (~33 B per call)
    "calls_streamed": ("AGENTX_MAX_CALLS_STREAMED", 10**11, "calls in one streamed trace"),
    "intervals": ("AGENTX_MAX_INTERVALS", 10_000_000, "time-series intervals"),
}


def limit(name: str) -> int:
    env, default, _ = LIMITS[name]
    raw = os.environ.get(env)
    try:
        return int(raw) if raw else default
    except ValueError:
        raise LimitError(f"{env} must be an integer, got {raw!r}") from None


def check(name: str, value: float, where: str) -> None:
    """Raise ``LimitError`` when ``value`` passes limit ``name``."""
    cap = limit(name)
    if value > cap:
        env, _, what = LIMITS[name]
        raise LimitError(
            f"{where}: {int(value):,} {what} is past the limit of {cap:,} "
            f"(set {env} to raise it, if the machine has the memory)"
        )
