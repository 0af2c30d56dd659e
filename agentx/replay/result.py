"""The tables and summary of a replay from its totals, for ``agentx.replay.replay``.

Owns ``ReplayResult`` (calls, stages, footprint, summary), ``Totals`` (what the partials of a
replay add up to) and ``replay_result``: the stage table with its shares and intensities, the
per-GPU HBM footprint at the resident KV peak, and summary.json's keys (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from agentx.replay.energy import coefficients
from agentx.replay.footprint import describe, footprint_per_gpu
from agentx.replay.stages import KEYS, STAGES

ENERGY_MODEL = (
    "E = P_static*gpus*t + e_flop(precision)*FLOPs + e_hbm*HBM bytes + e_link*link bytes; "
    "e_flop calibrated so a compute-bound GPU at its default efficiency draws its TDP"
)


@dataclass(frozen=True)
class ReplayResult:
    calls: pl.DataFrame  # one row per call: trace keys, token counts, per-stage columns
    stages: pl.DataFrame  # one row per stage
    footprint: pl.DataFrame  # component, bytes_per_gpu
    summary: dict


@dataclass
class Totals:
    """What the partials of a replay add up to (``merge_partials``, streamed replays)."""

    calls: int
    sums: np.ndarray  # stage × KEYS
    tokens: dict[str, int]
    sessions: int
    over_context: int


def replay_result(calls, cfg, totals: Totals, latency, resident, kv_summary) -> ReplayResult:
    """The stage table, footprint and summary of a replay from its totals, latency quantiles
    and resident KV peak ``(tokens, sequences)``; ``calls`` is passed through."""
    sums, tokens, n = totals.sums, totals.tokens, totals.calls
    stage_totals = {
        st: {k: float(sums[i, j]) for j, k in enumerate(KEYS)} for i, st in enumerate(STAGES)
    }
    t_all = sum(v["time_s"] for v in stage_totals.values())
    e_all = sum(v["energy_j"] for v in stage_totals.values())
    out_tokens = float(tokens["output_tokens"])
    for v in stage_totals.values():
        v["arithmetic_intensity"] = v["flops"] / v["hbm_bytes"] if v["hbm_bytes"] > 0 else 0.0
        v["time_share"] = v["time_s"] / t_all if t_all > 0 else 0.0
        v["energy_share"] = v["energy_j"] / e_all if e_all > 0 else 0.0
        v["j_per_output_token"] = v["energy_j"] / out_tokens if out_tokens > 0 else 0.0
    stage_df = pl.DataFrame([{"stage": st, **stage_totals[st]} for st in STAGES])
    tokens_res, seqs = resident
    fp = footprint_per_gpu(cfg, tokens_res, sequences=seqs or None)
    fp_df = pl.DataFrame(fp.as_rows())
    coef = coefficients(cfg)
    summary = {
        "system": cfg.system.name,
        "model": cfg.model.name,
        "layout": describe(cfg),
        "gpus": cfg.gpus,
        "decode_batch": cfg.decode_batch,
        "calls": n,
        "sessions": totals.sessions,
        "tokens": tokens,
        "stages": stage_totals,
        "total_time_s": t_all,
        "total_energy_j": e_all,
        "j_per_output_token": e_all / out_tokens if out_tokens > 0 else 0.0,
        "average_power_w_per_gpu": e_all / (t_all * cfg.gpus) if t_all > 0 else 0.0,
        "latency_s": latency,
        "hbm_peak_bytes_per_gpu": fp.total_bytes,
        "hbm_capacity_bytes_per_gpu": fp.capacity_bytes,
        "kv_fits_in_hbm": fp.fits,
        "kv_resident_tokens": tokens_res,
        "calls_over_max_context": totals.over_context,
        "kv_resident_sequences": seqs,
        "footprint": {r["component"]: r["bytes_per_gpu"] for r in fp.as_rows()},
        "energy_model": ENERGY_MODEL
        if coef.calibrated
        else ENERGY_MODEL + " (no TDP published: fallback pJ/FLOP, no static power)",
    }
    # a call's decode-experts time and energy are its output tokens times these (the pricing
    # kernel's one multiplication): agentx sql derives the columns a summary file leaves out
    from agentx.replay.kernel import K_ENERGY, K_TIME
    from agentx.replay.kernel_params import params

    exp_tok = params(cfg)[2]
    summary["decode_experts_per_output_token"] = {
        "time_s": float(exp_tok[K_TIME]),
        "energy_j": float(exp_tok[K_ENERGY]),
    }
    if kv_summary is not None:
        summary["kv_tiers"] = kv_summary
    return ReplayResult(calls, stage_df, fp_df, summary)
