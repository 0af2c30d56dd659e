"""The seam between the agentic scheduler and the hardware cost model: iteration price tables.

The scheduler (``agentic_kernel``) runs vLLM/SGLang-style iterations: every running decode
emits one token and up to ``token_budget`` prompt tokens are prefilled in chunks. The price of
an iteration is read from tables sampled once, so no Python runs inside the time loop:

* ``decode_s[b, g]``: one decode step of ``b`` sequences at mean context ``ctx_grid[g]``;
* ``fill_s[a, c]``: a chunk of ``new_grid[a]`` prompt tokens onto ``prefix_grid[c]`` tokens
  already in KV (a later chunk of a long prompt sees the earlier chunks as its prefix).

An iteration costs decode plus the sum of its chunks (``service_pricing``: today's
``ServiceModel`` pricing, where a chunk bears its own weight reads as in
``kernel_parts.fill_chunk``). Another pricing (e.g. a fused iteration model) only has to
produce the same tables.
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
