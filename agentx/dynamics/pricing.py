"""The seam between the agentic scheduler and the hardware cost model: iteration price tables.

The scheduler (``agentic_kernel``) runs vLLM/SGLang-style iterations: every running decode
emits one token and up to ``token_budget`` prompt tokens are prefilled in chunks. The price of
an iteration is read from tables sampled once, so no Python runs inside the time loop:

* ``decode_s[b, g]``: one decode step of ``b`` sequences at mean context ``ctx_grid[g]``;
* ``fill_s[a, c]``: a chunk of ``new_grid[a]`` prompt tokens onto ``prefix_grid[c]`` tokens
  already in KV (a later chunk of a long prompt sees the earlier chunks as its prefix).

An iteration costs decode plus the sum of its chunks plus ``floor_s`` when it has no decode.
``iteration_pricing`` (the default) samples ``agentx.serving.iteration.iteration_time_s``,
the per-iteration model ``agentx.serving`` validates against measurements, so the simulator
and the steady-state model price a decode-only or prefill-only pass identically; in a mixed
pass both parts read the weights (an upper bound: the fused pass reads them once).
``service_pricing`` keeps the older ``ServiceModel`` tables, where a chunk bears its own
weight reads as in ``kernel_parts.fill_chunk``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from agentx.dynamics.service import CTX_GRID_TOKENS, ServiceModel, service_tables

NEW_GRID_TOKENS = np.unique(np.round(np.geomspace(1, 2**20, 48)))
PREFIX_GRID_TOKENS = np.concatenate(([0.0], np.unique(np.round(np.geomspace(1, 4 * 2**20, 48)))))


@dataclass(frozen=True)
class PriceTables:
    decode_s: np.ndarray  # [batch, ctx grid]
    ctx_grid: np.ndarray
    fill_s: np.ndarray  # [new grid, prefix grid]
    new_grid: np.ndarray
    prefix_grid: np.ndarray
    source: str
    floor_s: float = 0.0  # per-pass floor, in decode_s but not in fill_s


def iteration_pricing(cfg, max_batch: int) -> PriceTables:
    """Tables from the per-iteration model of ``agentx.serving`` (decode-only passes, and
    prefill-only passes less their per-pass floor, which the kernel adds once)."""
    from agentx.serving.iteration import iteration_cost

    b = np.arange(1, max_batch + 1, dtype=np.float64)[:, None]
    ctx = CTX_GRID_TOKENS.astype(np.float64)
    dec = np.zeros((max_batch + 1, ctx.size))
    dec[1:] = iteration_cost(cfg, b, ctx[None, :])["time_s"]
    nn, pp = np.meshgrid(NEW_GRID_TOKENS, PREFIX_GRID_TOKENS, indexing="ij")
    pf = iteration_cost(cfg, 0.0, 0.0, nn, pp)
    floor = float(np.max(pf["floor_s"]))
    return PriceTables(
        dec, ctx, np.asarray(pf["time_s"] - pf["floor_s"], dtype=np.float64),
        NEW_GRID_TOKENS.astype(np.float64), PREFIX_GRID_TOKENS.astype(np.float64),
        "agentx.serving.iteration", floor,
    )  # fmt: skip


def service_pricing(svc: ServiceModel, max_batch: int) -> PriceTables:
    """Price tables from a ``ServiceModel`` (decode step table and fill cost on a 2-D grid)."""
    dec = service_tables(svc, max_batch)
    nn, pp = np.meshgrid(NEW_GRID_TOKENS, PREFIX_GRID_TOKENS, indexing="ij")
    fill = np.asarray(svc.fill(nn.ravel(), pp.ravel()).time_s, dtype=np.float64)
    return PriceTables(
        dec.decode_time_s,
        CTX_GRID_TOKENS.astype(np.float64),
        fill.reshape(nn.shape).copy(),
        NEW_GRID_TOKENS.astype(np.float64),
        PREFIX_GRID_TOKENS.astype(np.float64),
        f"agentx.dynamics.service ({getattr(svc, 'name', 'service')})",
    )


@njit(cache=True)
def _bracket(grid, x):
    g = min(max(np.searchsorted(grid, x), 1), grid.shape[0] - 1)
    x0, x1 = grid[g - 1], grid[g]
    return g, min(max((x - x0) / (x1 - x0), 0.0), 1.0)


@njit(cache=True)
def fill_price(table, new_grid, prefix_grid, n, p):
    """Bilinear interpolation of ``fill_s`` at ``n`` new tokens onto a ``p``-token prefix."""
    a, u = _bracket(new_grid, n)
    c, v = _bracket(prefix_grid, p)
    lo = table[a - 1, c - 1] * (1 - v) + table[a - 1, c] * v
    hi = table[a, c - 1] * (1 - v) + table[a, c] * v
    return lo * (1 - u) + hi * u
