"""Bandwidth vs capacity (SEED-12, SEED-13): decode revenue per GPU as HBM changes.

The revenue proxy is decode tokens/s per GPU at an interactivity floor (per-user tokens/s ≥
1 / ``tpot_slo_s``): every token sells at the same price, so revenue ∝ tokens/s per GPU.
Two curves on one system and model, everything else fixed:

- capacity: HBM bytes per GPU from just above the weights to several times the chip's, at
  the chip's bandwidth. More capacity holds more sequences (bigger batch) until the TPOT
  floor or compute binds; past that "enough" point the curve flattens (SEED-13).
- bandwidth: HBM bytes/s per GPU from a quarter to twice the chip's, at the chip's capacity.
  Decode is memory-bound, so tokens/s keeps rising with bandwidth (SEED-12).

For each variant the best batch is found over a batch grid in one vectorized cost call.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

BATCHES = np.unique(np.round(np.geomspace(1, 4096, 97)))
ENOUGH_SHARE = 0.95  # "enough" capacity: the first point reaching 95 % of the best throughput


def _variant(cfg, hbm_bytes: float | None = None, hbm_bytes_per_s: float | None = None):
    chip = cfg.system.chip
    chip = dataclasses.replace(
        chip,
        hbm_bytes=hbm_bytes or chip.hbm_bytes,
        hbm_bytes_per_s=hbm_bytes_per_s or chip.hbm_bytes_per_s,
    )
    return dataclasses.replace(cfg, system=dataclasses.replace(cfg.system, chip=chip))


def best_decode_point(cfg, context_tokens: float, tpot_slo_s: float) -> dict:
    """Highest decode tokens/s per GPU whose batch fits in HBM and meets the TPOT floor."""
    from agentx.replay.footprint import max_resident_tokens
    from agentx.replay.stages import decode_attention_step, decode_experts_step

    kv_tokens = max_resident_tokens(cfg, double_buffer=False)
    max_batch = float(np.floor(kv_tokens / context_tokens))
    b = BATCHES
    step = (
        decode_attention_step(cfg, b, b * context_tokens)["time_s"]
        + decode_experts_step(cfg, b)["time_s"]
    )
    thr = np.where((b <= max_batch) & (step <= tpot_slo_s), b / step / cfg.gpus, 0.0)
    k = int(np.argmax(thr))
    return {
        "kv_capacity_tokens": float(kv_tokens),
        "max_batch": max_batch,
        "best_batch": float(b[k]) if thr[k] > 0 else 0.0,
        "tokens_per_s_per_gpu": float(thr[k]),
        "per_user_tokens_per_s": float(1.0 / step[k]) if thr[k] > 0 else 0.0,
        "tpot_bound": bool(thr[k] > 0 and k + 1 < len(b) and b[k + 1] <= max_batch),
    }


def capacity_curves(
    catalog,
    hw: str = "b200",
    model: str = "kimi-k2",
    gpus: int = 16,
    context_tokens: float = 32_768,
    tpot_slo_s: float = 0.05,
    points: int = 24,
) -> pl.DataFrame:
    from agentx.replay.config import make_config
    from agentx.replay.footprint import footprint_per_gpu

    cfg = make_config(catalog, hw=hw, model=model, gpus=gpus, pools="aggregated")
    chip = cfg.system.chip
    base = footprint_per_gpu(cfg, 0.0, double_buffer=False).total_bytes
    rows = []
    for cap in np.linspace(base * 1.02, max(4 * chip.hbm_bytes, base * 2), points):
        rows.append(
            {
                "axis": "capacity",
                "hbm_bytes_per_gpu": float(cap),
                "hbm_bytes_per_s_per_gpu": chip.hbm_bytes_per_s,
                **best_decode_point(_variant(cfg, hbm_bytes=cap), context_tokens, tpot_slo_s),
            }
        )
    for bw in np.linspace(0.25, 2.0, points) * chip.hbm_bytes_per_s:
        rows.append(
            {
                "axis": "bandwidth",
                "hbm_bytes_per_gpu": chip.hbm_bytes,
                "hbm_bytes_per_s_per_gpu": float(bw),
                **best_decode_point(_variant(cfg, hbm_bytes_per_s=bw), context_tokens, tpot_slo_s),
            }
        )
    df = pl.DataFrame(rows).with_columns(
        system=pl.lit(hw),
        model=pl.lit(model),
        gpus=pl.lit(gpus),
        context_tokens=pl.lit(float(context_tokens)),
        tpot_slo_s=pl.lit(tpot_slo_s),
    )
    x = (
        pl.when(pl.col("axis") == "capacity")
        .then(pl.col("hbm_bytes_per_gpu"))
        .otherwise(pl.col("hbm_bytes_per_s_per_gpu"))
    )
    # Marginal revenue: extra tokens/s per GPU per extra GB (capacity) or per extra GB/s (bandwidth).
    return df.with_columns(
        marginal_tokens_per_s_per_gb=(
            pl.col("tokens_per_s_per_gpu").diff() / (x.diff() / 1e9)
        ).over("axis")
    )


def enough_capacity(curves: pl.DataFrame) -> dict:
    """Where the capacity curve flattens, and the slopes before and after (SEED-13)."""
    c = curves.filter(pl.col("axis") == "capacity").sort("hbm_bytes_per_gpu")
    best = float(c["tokens_per_s_per_gpu"].max())
    if best <= 0:
        return {"enough_hbm_bytes_per_gpu": float("nan"), "best_tokens_per_s_per_gpu": 0.0}
    reach = c.filter(pl.col("tokens_per_s_per_gpu") >= ENOUGH_SHARE * best)
    enough = float(reach["hbm_bytes_per_gpu"][0])
    slope = c["marginal_tokens_per_s_per_gb"]
    below = slope.filter(c["hbm_bytes_per_gpu"] <= enough).drop_nulls()
    above = slope.filter(c["hbm_bytes_per_gpu"] > enough).drop_nulls()
    b = curves.filter(pl.col("axis") == "bandwidth").sort("hbm_bytes_per_s_per_gpu")
    return {
        "enough_hbm_bytes_per_gpu": enough,
        "best_tokens_per_s_per_gpu": best,
        "slope_below_enough_per_gb": float(below.mean()) if below.len() else float("nan"),
        "slope_above_enough_per_gb": float(above.mean()) if above.len() else float("nan"),
        "bandwidth_gain_first_to_last": float(
            b["tokens_per_s_per_gpu"][-1] / max(b["tokens_per_s_per_gpu"][0], 1e-12)
        ),
        "capacity_gain_enough_to_last": float(c["tokens_per_s_per_gpu"][-1] / best),
    }
