"""What the chart families share: the column check that names a chart's missing inputs, the
orders stages and KV tier links are drawn in, and the Pareto reduction of a sweep.
"""

from __future__ import annotations

import polars as pl

LINKS = ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd")
# Replays split decode into attention and experts; sweeps report it as one "decode" stage.
STAGE_ORDER = ["prefill", "midfill", "decode", "decode_attention", "decode_experts"]


def _need(df: pl.DataFrame, cols: list[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs columns {missing}; got {df.columns}")


def pareto_frontier(sweep: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Points no other point of the same ``keys`` beats on both per-user and per-GPU speed.

    A sweep varies batch, chunk and context together; joining all its points would zigzag.
    Scanning from the fastest per-user speed down, a point is on the frontier when its
    throughput per GPU exceeds every faster point's (a cumulative max per group).
    """
    ranked = sweep.sort(
        [*keys, "per_user_tokens_per_s", "tokens_per_s_per_gpu"],
        descending=[*[False] * len(keys), True, True],
    )
    best_before = pl.col("tokens_per_s_per_gpu").cum_max().shift(1).over(keys)
    return ranked.filter(best_before.is_null() | (pl.col("tokens_per_s_per_gpu") > best_before))
