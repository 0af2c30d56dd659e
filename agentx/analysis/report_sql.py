"""The SQL the HTML report reads from the results views, and the frames it shapes from them.

The headline figures per run (``HEADLINE_KEYS``: summary.json keys of replay and simulate runs
in this report's units), the KV tier and link tables, the verdicts of claim-checking sweeps and
the agentic tables with each run's offload setting. ``report_answer`` and ``report_sections``
both read through these.
"""

from __future__ import annotations

import polars as pl

from agentx.analysis.views import Database
from agentx.units import MS

# The summary.json figures a reader looks at first (column → the keys replay and simulate runs
# use for it and the factor to this report's units: GB, ms, J).
HEADLINE_KEYS = {
    "j_per_output_token": (("j_per_output_token", "energy_per_output_token_j"), 1.0),
    "energy_j": (("total_energy_j", "energy_j"), 1.0),
    "hbm_peak_gb_per_gpu": (("hbm_peak_bytes_per_gpu",), 1e-9),
    "ttft_p50_ms": (("latency_s.ttft_s.p50", "ttft_s_p50"), 1e3),
    "ttft_p99_ms": (("latency_s.ttft_s.p99", "ttft_s_p99"), 1e3),
    "decode_latency_p50_ms": (("latency_s.decode_latency_s.p50",), 1e3),
    "tpot_p50_ms": (("tpot_s_p50",), 1e3),
}
_ALL_KEYS = [k for keys, _ in HEADLINE_KEYS.values() for k in keys]
HEADLINE_SQL = (
    "SELECT s.run, r.system, r.gpus, "
    + ", ".join(
        f"max(value) FILTER (WHERE key IN ({', '.join(repr(k) for k in keys)})) * {f} AS {alias}"
        for alias, (keys, f) in HEADLINE_KEYS.items()
    )
    + f" FROM summary s JOIN runs r USING (run) WHERE key IN ({', '.join(repr(k) for k in _ALL_KEYS)})"
    " GROUP BY ALL ORDER BY s.run"
)
# Replays with the tier model: per tier its capacity per GPU and the share of reused prompt
# tokens it served; per link the GB moved and the time the link was busy.
KV_TIERS_SQL = """
WITH k AS (SELECT run, key, value FROM summary WHERE key LIKE 'kv_tiers.%'),
reused AS (SELECT run, value AS tokens FROM k WHERE key = 'kv_tiers.reused_tokens'),
tiers AS (SELECT unnest(['hbm', 'dram', 'ssd']) AS tier, unnest([1, 2, 3]) AS o)
SELECT r.run, t.tier,
       max(k.value) FILTER (WHERE k.key = 'kv_tiers.capacities.' || t.tier || '_bytes')
         / 1e9 / r.gpus AS capacity_gb_per_gpu,
       100 * max(k.value) FILTER (WHERE k.key = 'kv_tiers.hits.' || t.tier || '.tokens')
         / nullif(max(u.tokens), 0) AS hit_pct_of_reused_tokens
FROM tiers t CROSS JOIN runs r JOIN k ON k.run = r.run LEFT JOIN reused u ON u.run = r.run
GROUP BY r.run, t.tier, t.o, r.gpus ORDER BY r.run, t.o
"""
KV_LINKS_SQL = """
SELECT run, substr(key, length('kv_tiers.bytes.') + 1) AS link,
       max(value) FILTER (WHERE key LIKE 'kv_tiers.bytes.%') / 1e9 AS gb_moved,
       (SELECT 1e3 * t.value FROM summary t WHERE t.run = s.run
         AND t.key = 'kv_tiers.link_time_s.' || substr(s.key, length('kv_tiers.bytes.') + 1))
         AS link_busy_ms
FROM summary s WHERE key LIKE 'kv_tiers.bytes.%' GROUP BY run, key ORDER BY run, link
"""
# Runs that check published claims (sweeps) record each verdict under summary key "verdict.*".
VERDICT_SQL = (
    "SELECT run, substr(key, 9) AS claim, CASE WHEN value = 1 THEN 'agrees' ELSE 'does not agree'"
    " END AS model_says FROM summary WHERE key LIKE 'verdict.%' ORDER BY run, key"
)
# Agentic simulations (simulate --users): per run and N the figures the public agentic
# benchmarks report, hit ratios as percent of the prompt tokens. The offload tier is the run's
# configuration (run.json), so runs with and without offload compare side by side.
AGENTIC_OFFLOAD_SQL = (
    "SELECT run, coalesce(json_extract_string(config, '$.offload'), 'none') AS offload FROM runs"
)
AGENTIC_TABLE_SQL = f"""
SELECT run, users,
       100 * gpu_prefix_hit_ratio AS gpu_prefix_hit_pct,
       100 * offload_hit_ratio AS offload_hit_pct,
       ttft_p50_s / {MS} AS ttft_p50_ms, tpot_p50_s / {MS} AS tpot_p50_ms, output_tok_s
FROM agentic_sweep ORDER BY run, users
"""


def _drop_empty(df: pl.DataFrame) -> pl.DataFrame:
    """Columns with no value at all (a replay has no TPOT percentile) are left out."""
    return df.select([c for c in df.columns if df[c].null_count() < df.height])


def _with_offload(db: Database, table: str) -> pl.DataFrame:
    """``table`` of the agentic runs with each run's tier setting (``offload_setting``) and the
    label charts colour by (``offload``: the setting, with the run's name when two runs share
    one, so every run keeps its own line)."""
    df = db.query(f"SELECT * FROM {table}")
    if "runs" in db.views:
        tiers = db.query(AGENTIC_OFFLOAD_SQL)
        df = df.join(tiers, on="run", how="left")
    else:  # standalone table files carry no configuration
        df = df.with_columns(pl.lit(None, pl.String).alias("offload"))
    df = df.with_columns(pl.col("offload").alias("offload_setting"))
    per_run = df.select("run", "offload").unique()
    if per_run["offload"].null_count() or per_run["offload"].n_unique() < per_run.height:
        df = df.with_columns(
            pl.concat_str("run", pl.lit(" ("), pl.col("offload").fill_null("?"), pl.lit(")")).alias(
                "offload"
            )
        )
    return df
