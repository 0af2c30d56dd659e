"""The seed study's qualitative claims, checked on a sweep (SEED-19, SEED-20, SEED-21).

Each verdict is computed from the operating points, reported with its numbers, and never
tuned: when the model disagrees with the seed, the disagreement is what is reported.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.dynamics.sweep import frontier
from agentx.units import GB


def _best_by_level(
    front: pl.DataFrame, levels: np.ndarray, x: str, y: str, better_low_y: bool
) -> pl.DataFrame:
    """For each system and level of ``y``: the best ``x`` among frontier points meeting it."""
    rows = []
    for (system,), g in front.group_by(["system"], maintain_order=True):
        xv, yv = g[x].to_numpy(), g[y].to_numpy()
        meets = (
            (yv[None, :] <= levels[:, None]) if better_low_y else (yv[None, :] >= levels[:, None])
        )
        best = np.where(meets, xv[None, :], -np.inf).max(axis=1)
        rows.append(pl.DataFrame({"system": [system] * len(levels), "level": levels, "best": best}))
    return pl.concat(rows)


TIE = 0.01  # within 1 % of each other counts as a tie, not a lead


def _leader_share(
    front: pl.DataFrame, x: str, y: str, better_low_y: bool, leader: str
) -> tuple[float, float]:
    """Shares of common ``y`` levels (log grid) at which ``leader`` delivers the highest ``x``
    by more than 1 % (a lead), and at which it is within 1 % of the best (a lead or a tie)."""
    lo = front.group_by("system").agg(pl.col(y).min())[y].max()
    hi = front.group_by("system").agg(pl.col(y).max())[y].min()
    if lo is None or hi is None or not lo < hi:
        return float("nan"), float("nan")
    levels = np.geomspace(lo, hi, 25)
    b = _best_by_level(front, levels, x, y, better_low_y)
    mine = b.filter(pl.col("system") == leader).select("level", mine="best")
    others = b.filter(pl.col("system") != leader).group_by("level").agg(other=pl.col("best").max())
    j = mine.join(others, on="level")
    if j.height == 0:  # nothing to compare against
        return float("nan"), float("nan")
    lead = (j["mine"] > (1 + TIE) * j["other"]).mean()
    lead_or_tie = (j["mine"] >= (1 - TIE) * j["other"]).mean()
    return float(lead), float(lead_or_tie)


def seed_verdicts(df: pl.DataFrame, hbm_limit_bytes: float = 80e9) -> dict:
    """SEED-19/20/21 as the model computes them on a sweep (numbers, never tuned to agree).

    SEED-19: share of the common interactivity range (per-user tokens/s) where GB200 gives the
    most decode tokens/s per GPU, per GPU count and context. SEED-20: midfill; which system
    has the lowest TTFT, and B300's best throughput per GPU over GB200's. SEED-21: share of
    frontier operating points whose peak HBM per GPU is below 80 GB.
    """
    out: dict = {"seed19_decode": [], "seed20_midfill": [], "seed21_hbm": {}}
    dec = frontier(
        df.filter(pl.col("stage") == "decode"),
        "tokens_per_s_per_gpu",
        "per_user_tokens_per_s",
        by=("system", "gpus", "stage", "context_tokens"),
    )
    for (g, c), part in dec.group_by(["gpus", "context_tokens"], maintain_order=True):
        share, share_or_tie = _leader_share(
            part, "tokens_per_s_per_gpu", "per_user_tokens_per_s", False, "gb200"
        )
        out["seed19_decode"].append(
            {
                "gpus": int(g),
                "context_tokens": int(c),
                "gb200_lead_share": share,
                "gb200_lead_or_tie_share": share_or_tie,
            }
        )
    mid = frontier(
        df.filter(pl.col("stage") == "midfill"),
        "tokens_per_s_per_gpu",
        "ttft_s",
        maximize_y=False,
        by=("system", "gpus", "stage", "context_tokens", "new_tokens"),
    )
    for (g,), part in mid.group_by(["gpus"], maintain_order=True):
        ttft = part.group_by("system").agg(pl.col("ttft_s").min()).sort("ttft_s")
        thr = part.group_by("system").agg(pl.col("tokens_per_s_per_gpu").max())
        t = dict(thr.iter_rows())
        out["seed20_midfill"].append(
            {
                "gpus": int(g),
                "lowest_ttft_system": ttft["system"][0],
                "min_ttft_s": dict(ttft.iter_rows()),
                "max_tokens_per_s_per_gpu": t,
                "b300_over_gb200_throughput": t.get("b300", np.nan) / t["gb200"]
                if "gb200" in t
                else float("nan"),
            }
        )
    fr = pl.concat([dec.select("hbm_peak_bytes_per_gpu"), mid.select("hbm_peak_bytes_per_gpu")])
    below = fr["hbm_peak_bytes_per_gpu"] < hbm_limit_bytes
    out["seed21_hbm"] = {
        "frontier_points": fr.height,
        "share_below_80gb": float(below.mean()) if fr.height else float("nan"),
        "max_gb": float(fr["hbm_peak_bytes_per_gpu"].max() or 0) / GB,
    }
    s19 = [
        r["gb200_lead_share"]
        for r in out["seed19_decode"]
        if r["gb200_lead_share"] == r["gb200_lead_share"]
    ]
    s19_tie = [r["gb200_lead_or_tie_share"] for r in out["seed19_decode"]]
    s19_tie = [x for x in s19_tie if x == x]
    out["verdict"] = {
        "seed19_gb200_leads_decode_most_of_curve": bool(s19) and float(np.mean(s19)) > 0.5,
        "seed19_mean_lead_share": float(np.mean(s19)) if s19 else float("nan"),
        "seed19_mean_lead_or_tie_share": float(np.mean(s19_tie)) if s19_tie else float("nan"),
        "seed20_gb200_lowest_midfill_ttft": all(
            r["lowest_ttft_system"] == "gb200" for r in out["seed20_midfill"]
        ),
        "seed20_b300_catches_up_at_throughput_end": all(
            r["b300_over_gb200_throughput"] >= 0.95 for r in out["seed20_midfill"]
        ),
        "seed21_peak_hbm_mostly_below_80gb": out["seed21_hbm"]["share_below_80gb"] > 0.5,
    }
    return out
