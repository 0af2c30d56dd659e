"""Per-call columns that follow from stored ones: SQL expressions, not bytes in calls.parquet.

``agentx sql`` adds each to a run view that has its inputs and lacks the column itself
(docs/metrics.md, "Derived in agentx sql"), so ``replay --calls summary`` loses no query.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

STAGE_SUM = " + ".join(
    f"{s}_{{k}}" for s in ("prefill", "midfill", "decode_attention", "decode_experts")
)
HITS = "kv_hbm_hit_tokens + kv_dram_hit_tokens + kv_ssd_hit_tokens"
DERIVED: dict[str, dict[str, str]] = {
    "replay_calls": {
        "fill_time_s": "prefill_time_s + midfill_time_s",
        "decode_time_s": "decode_attention_time_s + decode_experts_time_s",
        "total_time_s": STAGE_SUM.format(k="time_s"),
        "total_energy_j": STAGE_SUM.format(k="energy_j"),
        "kv_hit_tokens": HITS,
        # write-through, the policy of every replay: a block written to DRAM goes on to SSD
        # in the same call (agentx/kv/tiers.py)
        "kv_dram_to_ssd_bytes": "kv_hbm_to_dram_bytes",
        "kv_hit_ratio": f"CASE WHEN reused_prefix_tokens > 0 THEN ({HITS}) / reused_prefix_tokens END",
    }
}
_NAME = re.compile(r"\b[a-z_][a-z0-9_]*\b")
_SQL_WORDS = {"case", "when", "then", "end", "else"}


def derived_columns(view: str, columns) -> str:
    """The select list of ``view`` over a frame of ``columns``: ``*``, then ``, expr AS name``
    for every derived column computable from ``columns`` and not among them. One that is
    among them (runs stored it, others left it out: ``--calls full`` beside ``summary``) is
    the stored value where there is one, else the expression (``* REPLACE``)."""
    have = set(columns)
    add, fill = [], []
    for name, expr in DERIVED.get(view, {}).items():
        needs = set(_NAME.findall(expr)) - _SQL_WORDS
        if needs <= have:
            if name in have:
                fill.append(f'COALESCE("{name}", {expr}) AS "{name}"')
            else:
                add.append(f', {expr} AS "{name}"')
    return ("*" + (f" REPLACE ({', '.join(fill)})" if fill else "")) + "".join(add)


def with_run_columns(df: pl.DataFrame, summary: dict) -> pl.DataFrame:
    """``df`` (a replay's calls) with the columns a ``--calls summary`` file leaves out that
    follow from its stored columns and constants of its summary.json, made by the float
    operations of the kernels that priced them: the values ``--calls full`` stores, bit for
    bit. A column already there, or one whose inputs are missing, is left as it is."""
    return _decode_experts(_kv_transfer(_counts(df), summary or {}), summary or {})


def _counts(df: pl.DataFrame) -> pl.DataFrame:
    """Token counts that follow from others: a call's new tokens are its input less its reused
    prefix (a rule of the trace schema), and every reused token is found in a tier or
    recomputed (agentx.kv: the tiers' hits and the recomputes add up to the reused prefix)."""
    rules = {
        "new_tokens": pl.col("input_tokens") - pl.col("reused_prefix_tokens"),
        "kv_hbm_hit_tokens": pl.col("reused_prefix_tokens")
        - pl.col("kv_dram_hit_tokens")
        - pl.col("kv_ssd_hit_tokens")
        - pl.col("kv_recompute_tokens"),
    }
    have = set(df.columns)
    add = [
        expr.alias(name)
        for name, expr in rules.items()
        if name not in have and set(expr.meta.root_names()) <= have
    ]
    return df.with_columns(add) if add else df


def _decode_experts(df: pl.DataFrame, summary: dict) -> pl.DataFrame:
    """Decode-experts time and energy: output tokens × the per-token cost
    (``decode_experts_per_output_token``; agentx.replay.kernel._one's one multiplication)."""
    per = summary.get("decode_experts_per_output_token")
    if not per or "output_tokens" not in df.columns:
        return df
    m = df.get_column("output_tokens").to_numpy().astype(np.float64)
    return df.with_columns(
        pl.Series(f"decode_experts_{k}", m * float(per[k]))
        for k in ("time_s", "energy_j")
        if f"decode_experts_{k}" not in df.columns
    )


def _kv_transfer(df: pl.DataFrame, summary: dict) -> pl.DataFrame:
    """KV reload time and energy from the link bytes and the link costs of ``kv_tiers.links``,
    as agentx.kv.tiers._place makes them."""
    links = (summary.get("kv_tiers") or {}).get("links")
    # agentx.kv.tiers.LINKS, the kernel's summation order (not imported: agentx sql loads
    # no numba)
    names = ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd")
    have = set(df.columns)
    if not links or {"kv_transfer_time_s", "kv_transfer_energy_j"} <= have:
        return df
    # under write-through a block written to DRAM goes on to SSD in the same call
    cols = {k: f"kv_{k}_bytes" if f"kv_{k}_bytes" in have else None for k in names}
    cols["dram_to_ssd"] = cols["dram_to_ssd"] or cols["hbm_to_dram"]
    if None in cols.values() or any(k not in links for k in names):
        return df
    x = [df.get_column(cols[k]).cast(pl.Float64).to_numpy() for k in names]
    bw = [float(links[k]["bytes_per_s"]) for k in names[:2]]
    j = [float(links[k]["j_per_byte"]) for k in names]
    with np.errstate(all="ignore"):
        t0, t1 = x[0] / bw[0], x[1] / bw[1]
        # the slower of the two pipelined loads, a NaN kept (as the kernel's t0 >= t1 or NaN)
        time_s = np.where((t0 >= t1) | np.isnan(t0), t0, t1)
        energy_j = 0.0 + x[0] * j[0]  # Python's sum(): 0 + the first term, then in order
        for xi, ji in zip(x[1:], j[1:], strict=True):
            energy_j = energy_j + xi * ji
    return df.with_columns(
        pl.Series("kv_transfer_time_s", time_s), pl.Series("kv_transfer_energy_j", energy_j)
    )
