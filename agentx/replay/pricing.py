"""What a replay reads of a trace and how its calls are priced, for ``agentx.replay.replay``.

Owns the trace columns a replay reads (``TRACE_COLUMNS``, ``KV_COLUMNS``), the per-call
columns it writes (``CALL_COLUMNS``, ``priced_columns``) and the pricing itself
(``price_calls``: trace columns and the KV outcome in, the compiled kernel's columns and stage
sums out; ``call_frame``). Column meanings, units and formulas: docs/metrics.md.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import InputError
from agentx.replay.stages import STAGES

TRACE_COLUMNS = (
    "session_id",
    "call_index",
    "agent_id",
    "t_start_s",
    "input_tokens",
    "reused_prefix_tokens",
    "new_tokens",
    "output_tokens",
)
# The trace columns only the KV tiers read (geometry and block ids).
KV_COLUMNS = ("is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")
LATENCY = ("ttft_s", "decode_latency_s")
CALL_KEYS = ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes")


def _kv_frame(kv, n: int):
    if kv is None:
        return None
    per_call = getattr(kv, "per_call", kv)
    height = per_call.height if hasattr(per_call, "height") else len(next(iter(per_call.values())))
    if height != n:
        raise InputError(
            "<kv tiers>", f"expected {n} per-call rows (one per trace call), got {height}"
        )
    return per_call


def _held(calls, name: str):
    """Column ``name`` of a frame or mapping as it is held (a view where it can be), or None."""
    if hasattr(calls, "columns"):
        return calls.get_column(name).to_numpy() if name in calls.columns else None
    return np.asarray(calls[name]) if name in calls else None


def _col(calls, name: str, default=None):
    """``_held`` as float64 (no copy where it is already), or ``default``."""
    held = _held(calls, name)
    return default if held is None else held.astype(np.float64, copy=False)


CALL_COLUMNS = (
    *(f"{st}_{k}" for st in STAGES for k in CALL_KEYS),
    "ttft_s",
    "decode_latency_s",
    "total_energy_j",
)


def price_calls(
    cfg: ServingConfig, calls, kv=None, columns=CALL_COLUMNS, parallel: bool = True, into=None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-call ``columns`` (rows, of ``CALL_COLUMNS``, in that order) and stage totals
    (stage × ``KEYS``, of every column whichever are kept).

    Fills are packed into forward passes of ``prefill_chunk_tokens`` tokens with other fills,
    as a loaded fill pool runs them, so a call bears new/chunk of each pass's weight load;
    ttft_s prices the fill alone. Decode shares each step among ``decode_batch`` sequences.
    ``kv`` (per-call arrays from agentx.kv, optional): kv_recompute_tokens move from the
    reused prefix to the filled tokens (a call whose whole prefix is lost becomes a prefill);
    kv_transfer_time_s and kv_transfer_energy_j (reloads from DRAM/SSD) join the call's fill.
    ``parallel``: as in ``agentx.replay.kernel.kernel_for``; ``into``: as in
    ``agentx.replay.kernel.price``.
    """
    from agentx import warm
    from agentx.replay.kernel import params, price

    warm.settle()  # a helper compiling these kernels (a first run) has put them in the cache

    out = np.ascontiguousarray(_col(calls, "output_tokens"))
    rec = None if kv is None else _held(kv, "kv_recompute_tokens")
    if rec is None:
        n = np.ascontiguousarray(_col(calls, "new_tokens"))
        p = np.ascontiguousarray(_col(calls, "reused_prefix_tokens"))
    else:  # in the columns' own types, then float64 as each op's output: no float copies first
        # (token counts are whole numbers below 2^53: every value is the float one's)
        reused = _held(calls, "reused_prefix_tokens")
        rec = np.minimum(rec, reused)
        n = np.add(_held(calls, "new_tokens"), rec, dtype=np.float64)
        p = np.subtract(reused, rec, dtype=np.float64)
    xt = xe = np.zeros(0)
    if kv is not None:
        xt = np.broadcast_to(_col(kv, "kv_transfer_time_s", 0.0), n.shape).astype(np.float64)
        xe = np.broadcast_to(_col(kv, "kv_transfer_energy_j", 0.0), n.shape).astype(np.float64)
    q, dtab, exp_tok = params(cfg)
    keep = [CALL_COLUMNS.index(c) for c in columns]
    cols, sums = price(q, dtab, exp_tok, n, p, out, xt, xe, keep, parallel, into)
    return cols, sums.sum(axis=0)


def call_frame(cfg: ServingConfig, calls, kv=None) -> pl.DataFrame:
    """The per-stage and latency columns of ``calls`` (see ``agentx.replay.stages.call_costs``)."""
    cols, _ = price_calls(cfg, calls, kv)
    return pl.DataFrame(dict(zip(CALL_COLUMNS, cols, strict=True)))


def priced_columns(wanted=None) -> tuple[str, ...]:
    """The ``CALL_COLUMNS`` among ``wanted`` (None: all), in their order, with the two
    latencies the merge reads always kept: a replay writing ``--calls summary`` prices no
    per-call FLOPs or bytes (12 of the 23 rows: 96 MB per million calls not made)."""
    if wanted is None:
        return CALL_COLUMNS
    wanted = set(wanted) | set(LATENCY)
    return tuple(c for c in CALL_COLUMNS if c in wanted)
