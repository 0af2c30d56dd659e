"""Tier capacities of a serving configuration, and the bytes, time and energy of every link.

Links (SEED-5): SSD→DRAM and DRAM→SSD (NVMe), DRAM→HBM and HBM→DRAM (the host link: NVLink-C2C
on Grace systems, PCIe on x86 hosts). A block found in DRAM crosses the host link; one found on
SSD crosses both links; one found nowhere is recomputed (charged as prefill by the cost model).
New and recomputed blocks go down the hierarchy either at once (``write-through``, as LMCache
and vLLM's CPU offload store blocks when computed) or when evicted (``write-back``, once per
block life per link). Loads are on the call's critical path and overlap across the two links;
writes are asynchronous, so they cost bytes and energy but no call time.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import polars as pl

from agentx import warm
from agentx.catalog.types import ServingConfig
from agentx.errors import UsageError
from agentx.kv.blocks import BlockStream
from agentx.kv.policies import DRAM, HBM, NOWHERE, SSD, Outcome

# the tiers' sizes live with the footprint they come from (no numba there: kv-curve reads
# them before its trace, while the kernels are imported beside the read)
from agentx.replay.footprint import TierCapacities, capacities_for  # noqa: F401

WRITE_POLICIES = ("write-through", "write-back")
LINKS = ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd")
PER_CALL = (
    "kv_hbm_hit_tokens",
    "kv_dram_hit_tokens",
    "kv_ssd_hit_tokens",
    "kv_recompute_tokens",
    *(f"kv_{link}_bytes" for link in LINKS),
    "kv_transfer_time_s",
    "kv_transfer_energy_j",
)


def link_costs(cfg: ServingConfig) -> dict[str, tuple[float, float]]:
    """(bytes/s available to one call, J per byte) per link.

    A call's KV is split over ``min(tp, kv_heads)`` GPUs for tensor-parallel GQA; with data-
    parallel attention or MLA (one latent per token) one GPU's link carries it. DRAM→HBM runs at
    the slower of the host link and the host DRAM share; energy adds both ends (NOTES.md (b)).
    """
    s, m = cfg.system, cfg.model
    split = 1 if (cfg.dp_attention or m.attention == "mla") else min(cfg.tp, m.num_kv_heads)
    pj = 8e-12  # J per byte per pJ/bit
    host = min(s.host_link_bytes_per_s, s.host_dram_bytes_per_s) * split
    host_j = (s.host_link_pj_per_bit + s.host_dram_pj_per_bit + cfg.chip.hbm_pj_per_bit) * pj
    ssd = s.ssd_bytes_per_s * split
    ssd_j = (s.ssd_pj_per_bit + s.host_dram_pj_per_bit) * pj
    return {
        "ssd_to_dram": (ssd, ssd_j),
        "dram_to_hbm": (host, host_j),
        "hbm_to_dram": (host, host_j),
        "dram_to_ssd": (ssd, ssd_j),
    }


def per_call_frame(
    out: Outcome,
    stream: BlockStream,
    n_rows: int,
    bytes_per_token: float,
    cfg: ServingConfig,
    write_policy: str = "write-through",
) -> pl.DataFrame:
    """The ``PER_CALL`` columns, one row per trace row (trace order)."""
    row = stream.row
    if write_policy not in WRITE_POLICIES:
        raise UsageError(
            f"unknown write policy '{write_policy}'; choose one of {', '.join(WRITE_POLICIES)}"
        )
    n_calls = len(row)
    agg = lambda w: np.bincount(out.call, weights=w, minlength=n_calls)  # noqa: E731
    rd = out.is_read
    seg_tok = (out.n * out.block_tokens).astype(np.float64)
    cols: dict[str, np.ndarray] = {}
    for name, t in (("hbm", HBM), ("dram", DRAM), ("ssd", SSD)):
        cols[f"kv_{name}_hit_tokens"] = agg(np.where(rd & (out.tier == t), out.read_tokens, 0))
    cols["kv_recompute_tokens"] = agg(np.where(rd & (out.tier == NOWHERE), out.read_tokens, 0))
    # Only reads load: a write recomputes its tokens anyway, and a copy it finds below stays put.
    cols["kv_ssd_to_dram_bytes"] = (
        agg(np.where(rd & (out.tier == SSD), seg_tok, 0)) * bytes_per_token
    )
    lower = (out.tier == DRAM) | (out.tier == SSD)
    cols["kv_dram_to_hbm_bytes"] = agg(np.where(rd & lower, seg_tok, 0)) * bytes_per_token
    if write_policy == "write-through":
        created = agg(np.where(out.tier == NOWHERE, seg_tok, 0)) * bytes_per_token
        cols["kv_hbm_to_dram_bytes"], cols["kv_dram_to_ssd_bytes"] = created, created.copy()
    else:
        hd, ds = _write_back_kernel(
            out.call,
            out.ref0,
            out.n,
            out.tier,
            stream.ref_block,
            out.block_weight,
            out.final_tier,
            n_calls,
        )
        cols["kv_hbm_to_dram_bytes"], cols["kv_dram_to_ssd_bytes"] = (
            hd * bytes_per_token,
            ds * bytes_per_token,
        )
    return finish_frame(cols, row, n_rows, cfg)


def finish_frame(
    cols: dict, row: np.ndarray, n_rows: int, cfg: ServingConfig, bytes_per_token: float = 1.0,
    every_row: bool = False,
) -> pl.DataFrame:  # fmt: skip
    """Transfer time and energy from the bytes per link, and the ``PER_CALL`` columns in
    trace row order. ``cols``: hits, recomputes and bytes per call in time order (only read);
    the byte columns are multiplied by ``bytes_per_token`` (so token counts can be passed as
    they are). One pass places every column; rows without a call stay zero. ``every_row``:
    ``row`` names each of the ``n_rows`` rows once, so none needs zeroing first (ten columns:
    7-8 ms of a streaming replay's pricing thread per 2^19-call partition)."""
    costs = link_costs(cfg)
    x = [cols[name] for name in PER_CALL[:-2]]
    new = np.empty if every_row and row.size == n_rows else np.zeros
    out = [new(n_rows, np.int64 if n.endswith("_tokens") else np.float64) for n in PER_CALL]
    if x[7] is x[6]:  # one array under two names (write-through): one column, placed once
        out[7] = out[6]
    bw = (costs["ssd_to_dram"][0], costs["dram_to_hbm"][0])
    pj = tuple(costs[k][1] for k in LINKS)
    warm.settle()  # a helper compiling _place (a first run) has put it in the cache
    _place(row, *x, float(bytes_per_token), *bw, *pj, *out)
    return pl.DataFrame(dict(zip(PER_CALL, out, strict=True)))


@nb.njit(cache=True, nogil=True)  # per partition, beside the calls.parquet writer thread
def _place(row, h, d, s, rc, b0, b1, b2, b3, scale, bw0, bw1, j0, j1, j2, j3,
           oh, od, os_, orc, o0, o1, o2, o3, otime, oenergy):  # fmt: skip  # pragma: no cover
    """Per call: tokens rounded, bytes scaled, the critical-path time (the slower of the two
    loads, NaN kept as np.maximum does) and the energy summed over the links in order."""
    for k in range(row.size):
        r = row[k]
        oh[r] = np.int64(np.rint(h[k]))
        od[r] = np.int64(np.rint(d[k]))
        os_[r] = np.int64(np.rint(s[k]))
        orc[r] = np.int64(np.rint(rc[k]))
        x0, x1, x2, x3 = b0[k] * scale, b1[k] * scale, b2[k] * scale, b3[k] * scale
        o0[r], o1[r], o2[r], o3[r] = x0, x1, x2, x3
        t0, t1 = x0 / bw0, x1 / bw1
        otime[r] = t0 if (t0 >= t1 or t0 != t0) else t1
        e = 0.0 + x0 * j0  # as Python's sum(): 0 + the first term, then left to right
        e += x1 * j1
        e += x2 * j2
        e += x3 * j3
        oenergy[r] = e


@nb.njit(cache=True)
def _write_back_kernel(
    call, ref0, n, tier, ref_block, weight, final_tier, n_calls
):  # pragma: no cover
    """A block's copy below a tier exists once written there or loaded through it; the call
    that last used a block pays for its write-back when it is evicted (here: when the next use
    or the end of the trace shows it was)."""
    hd = np.zeros(n_calls)
    ds = np.zeros(n_calls)
    has_d = np.zeros(weight.size, np.bool_)
    has_s = np.zeros(weight.size, np.bool_)
    last_call = np.full(weight.size, -1, np.int64)
    for s in range(call.size):
        t = tier[s]
        for r in range(ref0[s], ref0[s] + n[s]):
            b = ref_block[r]
            if last_call[b] >= 0:
                _evict(b, t, last_call[b], weight, has_d, has_s, hd, ds)
            if t == 3:
                has_d[b] = False
                has_s[b] = False
            elif t >= 1:
                has_d[b] = True
            last_call[b] = call[s]
    for b in range(weight.size):
        if last_call[b] >= 0 and final_tier[b] >= 0:
            _evict(b, final_tier[b], last_call[b], weight, has_d, has_s, hd, ds)
    return hd, ds


@nb.njit(cache=True, inline="always")
def _evict(b, t, k, weight, has_d, has_s, hd, ds):  # pragma: no cover (compiled)
    if t >= 1 and not has_d[b]:
        hd[k] += weight[b]
        has_d[b] = True
    if t >= 2 and not has_s[b]:
        ds[k] += weight[b]
        has_s[b] = True


def traffic_over_time(
    trace_calls: pl.DataFrame, per_call: pl.DataFrame, bucket_s: float = 60.0
) -> pl.DataFrame:
    """Bytes per link and mean rate per bucket of ``t_start_s`` (calls attributed at arrival)."""
    if bucket_s <= 0:
        raise UsageError(f"--bucket-s must be positive, got {bucket_s}")
    df = pl.concat([trace_calls.select("t_start_s"), per_call], how="horizontal")
    cols = [f"kv_{k}_bytes" for k in LINKS]
    return (
        df.with_columns(((pl.col("t_start_s") // bucket_s) * bucket_s).alias("bucket_start_s"))
        .group_by("bucket_start_s")
        .agg(
            pl.len().alias("calls"),
            pl.col("kv_recompute_tokens").sum(),
            *[pl.col(c).sum() for c in cols],
        )
        .with_columns(
            [(pl.col(c) / bucket_s).alias(c.replace("_bytes", "_bytes_per_s")) for c in cols]
        )
        .sort("bucket_start_s")
    )
