"""What the planner searches over: the offered load of a trace (``Load``, ``scale`` times over)
and the layouts of a system tried against it (GPUs per instance, attention parallelism).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from agentx.errors import UsageError


@dataclass(frozen=True)
class Load:
    """The offered load: the trace's calls over its duration, ``scale`` times over.

    ``scale`` = K prices K replicas of every session (``agentx.traces.transform.scale_load``)
    without building them: replicas are priced call by call exactly as their originals, so
    busy time, energy and tokens are K times the trace's and every latency percentile is the
    trace's own (tests/test_planner.py checks this against the materialised replicas).
    """

    calls: pl.DataFrame
    duration_s: float
    scale: float = 1.0

    @property
    def output_tokens(self) -> float:
        return self.scale * float(self.calls.get_column("output_tokens").sum())

    @property
    def total_tokens(self) -> float:
        return self.scale * float(self.calls.get_column("input_tokens").sum()) + self.output_tokens


def trace_load(calls: pl.DataFrame, scale: float = 1.0) -> Load:
    """The load of ``calls``: their span from the first arrival to the last (at least 1 s)."""
    if calls.height == 0:
        raise UsageError("the trace has no calls to plan for")
    if not (scale > 0 and math.isfinite(scale)):
        raise UsageError(f"--load-scale must be a positive number, got {scale:g}")
    t = calls.get_column("t_start_s")
    return Load(calls, max(float(t.max() - t.min()), 1.0), float(scale))


def layouts(system, model, gpus: list[int] | None) -> list[tuple[int, bool | None]]:
    """(GPUs per instance, data-parallel attention) candidates: powers of two up to a node, node
    multiples (powers of two) up to the scale-up domain (at least 8 nodes), or the user's counts."""
    if gpus is None:
        node, dom = system.gpus_per_node, system.scale_up_domain_gpus
        top = min(max(dom, 8 * node), 128)
        # a small model may need less than a node: 1, 2, 4, … GPUs are tried too
        gpus = sorted(
            {2**i for i in range(8) if 2**i < node}
            | {node * 2**i for i in range(8) if node * 2**i <= top}
            | {min(dom, top)}
        )
    attn = (True, False) if model.attention == "mla" else (None,)
    return [(g, a) for g in gpus for a in attn]
