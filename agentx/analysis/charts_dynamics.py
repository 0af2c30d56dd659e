"""Charts of serving over time and against load: simulated queue, batch, utilisation and
power; KV-cache usage of agentic simulations; prefix hits, throughput and TTFT against the
number of concurrent sessions N.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from agentx.analysis.charts_frames import _need


def sim_timeseries(ts: pl.DataFrame, by: str | None = None, max_points: int = 400) -> alt.Chart:
    """Simulated queue, decode batch, utilisation and power over time (SEED-15 oscillation).

    A long simulation samples every second for days; it is averaged into at most
    ``max_points`` equal time bins per run so the chart stays small.
    """
    _need(ts, ["t_s"], "sim_timeseries")
    metrics = [
        c
        for c in ("fill_queue_len", "decode_batch_size", "utilisation", "power_w")
        if c in ts.columns
    ]
    index = ["t_s"] + ([by] if by else [])
    ts = ts.select(*index, *[pl.col(m).cast(pl.Float64) for m in metrics])
    if ts.height > max_points * (ts[by].n_unique() if by else 1):
        t0, t1 = ts["t_s"].min(), ts["t_s"].max()
        width = max((t1 - t0) / max_points, 1e-9)
        bin_t = (((pl.col("t_s") - t0) / width).floor().clip(0, max_points - 1) * width + t0).alias(
            "t_s"
        )
        ts = ts.group_by([bin_t, *index[1:]]).agg(pl.col(m).mean() for m in metrics).sort(index)
    long = ts.unpivot(index=index, variable_name="metric", value_name="value")
    enc = {
        "x": alt.X("t_s:Q", title="time (s)"),
        "y": alt.Y("value:Q", title=None),
        "row": alt.Row("metric:N", sort=metrics, title=None),
    }
    if by:
        enc["color"] = f"{by}:N"
    chart = alt.Chart(long, title="Serving dynamics over time").mark_line().encode(**enc)
    return chart.properties(height=90).resolve_scale(y="independent")


def kv_usage_over_time(ts: pl.DataFrame, max_points: int = 400, by: str | None = None) -> alt.Chart:
    """KV-cache usage and cached share of the HBM pool over time, one line per N
    (``agentic_timeseries``), averaged into at most ``max_points`` bins per N; with ``by``
    (say ``offload``) one row of the chart per value, so runs do not draw over each other."""
    _need(ts, ["t_s", "users", "kv_usage_ratio"], "kv_usage_over_time")
    cols = [c for c in ("kv_usage_ratio", "kv_cached_ratio") if c in ts.columns]
    width = max(float(ts["t_s"].max() or 0.0) / max_points, 1.0)
    keys = ["users"] + ([by] if by else [])
    binned = (
        ts.group_by((pl.col("t_s") / width).floor().alias("bin"), *keys)
        .agg(pl.col("t_s").min(), *(pl.col(c).mean() for c in cols))
        .drop("bin")
        .sort(*keys, "t_s")
        .unpivot(index=["t_s", *keys], variable_name="metric", value_name="ratio")
    )
    enc = {
        "x": alt.X("t_s:Q", title="time (s)"),
        "y": alt.Y("ratio:Q", title="share of the HBM pool", scale=alt.Scale(domain=[0, 1])),
        "color": alt.Color("users:O", title="users"),
        "strokeDash": alt.StrokeDash("metric:N", title=None),
    }
    if by:
        enc["row"] = alt.Row(f"{by}:N", title=by)
    chart = alt.Chart(binned, title="KV cache usage over time").mark_line().encode(**enc)
    return chart.properties(height=180)


def _vs_users(sweep: pl.DataFrame, metrics: list[str], title: str, log_y: bool) -> alt.Chart:
    by = "offload" if "offload" in sweep.columns else None
    index = ["users"] + ([by] if by else [])
    _need(sweep, [*index, *metrics], title)
    long = sweep.select(*index, *metrics).unpivot(
        index=index, variable_name="metric", value_name="value"
    )
    enc = {
        "x": alt.X("users:Q", title="concurrent sessions (N)", scale=alt.Scale(type="log", base=2)),
        "y": alt.Y("value:Q", title=None, scale=alt.Scale(type="log") if log_y else alt.Scale()),
        "row": alt.Row("metric:N", sort=metrics, title=None),
    }
    if by:
        enc["color"] = alt.Color(f"{by}:N", title="offload")
    chart = alt.Chart(long, title=title).mark_line(point=True).encode(**enc)
    return chart.properties(height=120).resolve_scale(y="independent")


def hit_ratio_vs_users(sweep: pl.DataFrame) -> alt.Chart:
    """GPU and offload prefix-hit ratios against N (``agentic_sweep``; an ``offload`` column,
    when present, colours runs with and without offload)."""
    return _vs_users(
        sweep, ["gpu_prefix_hit_ratio", "offload_hit_ratio"], "Prefix hits vs N", False
    )


def throughput_ttft_vs_users(sweep: pl.DataFrame) -> alt.Chart:
    """Output and total tokens/s and TTFT p50/p99 against N, with and without offload."""
    metrics = ["output_tok_s", "total_tok_s", "ttft_p50_s", "ttft_p99_s"]
    return _vs_users(sweep, metrics, "Throughput and TTFT vs N", True)
