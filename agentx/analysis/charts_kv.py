"""Charts of the KV cache and the context it holds: bytes per tier link over trace time, hit
ratio against tier capacity, and context length per session with compactions marked.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from agentx.analysis.charts_frames import LINKS, _need
from agentx.units import GB


def kv_link_bytes(calls: pl.DataFrame, by: str = "run", bins: int = 60) -> alt.Chart:
    """KV bytes per tier link over trace time, summed in ``bins`` equal time bins (SEED-5)."""
    cols = [f"kv_{link}_bytes" for link in LINKS]
    _need(calls, [by, "t_start_s", *cols], "kv_link_bytes")
    t0, t1 = calls["t_start_s"].min(), calls["t_start_s"].max()
    width = max((t1 - t0) / bins, 1e-9) if calls.height else 1.0
    sums = (
        calls.with_columns(
            bin=((pl.col("t_start_s") - t0) / width).floor().clip(0, bins - 1).cast(pl.Int64)
        )
        .group_by(by, "bin")
        .agg([pl.col(c).sum().alias(c[3:-6]) for c in cols])
    )
    # Empty bins are zero traffic, not gaps a line should bridge.
    grid = calls.select(pl.col(by).unique()).join(pl.DataFrame({"bin": range(bins)}), how="cross")
    binned = (
        grid.join(sums, on=[by, "bin"], how="left")
        .fill_null(0)
        .with_columns(t_s=pl.col("bin") * width + t0)
        .unpivot(index=[by, "t_s"], on=list(LINKS), variable_name="link", value_name="bytes")
        .with_columns(gb=pl.col("bytes") / GB)
        .sort(by, "link", "t_s")
    )
    return (
        alt.Chart(binned, title="KV bytes per tier link over time")
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("t_s:Q", title="trace time (s)"),
            y=alt.Y("gb:Q", title="GB per time bin"),
            color=alt.Color("link:N", sort=list(LINKS)),
            row=alt.Row(f"{by}:N", title=None),
            tooltip=[by, "link", "t_s", alt.Tooltip("gb:Q", format=".3f")],
        )
        .properties(height=140)
    )


def context_growth(calls: pl.DataFrame, max_sessions: int = 12) -> alt.LayerChart:
    """Prompt length per main-agent call of the longest sessions; compactions marked (SEED-6)."""
    _need(calls, ["session_id", "call_index", "agent_id", "input_tokens"], "context_growth")
    main = calls.filter(pl.col("agent_id").is_null()).sort("session_id", "call_index")
    if "is_compaction" not in main.columns:
        # Replay tables keep only the trace keys: mark where the prompt shrank below half the
        # previous call's, the sharp drop that defines a compaction in the trace schema.
        prev = pl.col("input_tokens").shift(1).over("session_id")
        main = main.with_columns(is_compaction=(pl.col("input_tokens") * 2 < prev).fill_null(False))
    top = (
        main.group_by("session_id")
        .agg(n=pl.len())
        .sort(["n", "session_id"], descending=[True, False])
        .head(max_sessions)
    )
    df = (
        main.join(top.select("session_id"), on="session_id")
        .select("session_id", "call_index", "input_tokens", "is_compaction")
        .sort("session_id", "call_index")
    )
    line = (
        alt.Chart(df)
        .mark_line()
        .encode(
            x=alt.X("call_index:Q", title="call in session"),
            y=alt.Y("input_tokens:Q", title="context (input tokens)"),
            color=alt.Color("session_id:N", legend=None),
            tooltip=["session_id", "call_index", "input_tokens"],
        )
    )
    marks = (
        alt.Chart(df.filter(pl.col("is_compaction")))
        .mark_point(shape="triangle-down", size=90, filled=True, color="crimson")
        .encode(
            x="call_index:Q",
            y="input_tokens:Q",
            tooltip=["session_id", "call_index", "input_tokens"],
        )
    )
    return alt.layer(
        line,
        marks,
        title=f"Context length per session ({df['session_id'].n_unique()} longest; ▼ compaction)",
    )


def hit_ratio_curve(
    kv_curve: pl.DataFrame, by: str | None = None, configured: pl.DataFrame | None = None
) -> alt.LayerChart:
    """KV hit ratio against tier capacity per GPU, one curve per tier (SEED-13: past 'enough'
    it flattens), with each tier's configured capacity marked by a vertical rule.

    ``kv_curve`` may carry ``gpus`` (the run's GPU count): capacities are then per GPU, as a
    planner buys them; without it they are the whole system's. ``configured`` (tier,
    capacity_gb and ``by``) draws the rules.
    """
    _need(kv_curve, ["tier", "capacity_bytes", "hit_ratio"], "hit_ratio_curve")
    per_gpu = "gpus" in kv_curve.columns
    cols = ["tier", "capacity_bytes", "hit_ratio"] + ([by] if by else [])
    div = pl.col("gpus") if per_gpu else pl.lit(1)
    df = (
        kv_curve.with_columns(capacity_gb=pl.col("capacity_bytes") / GB / div)
        .select(*cols, "capacity_gb")
        .sort(cols[:2])
    )
    where = "per GPU" if per_gpu else "whole system"
    enc = {
        # symlog, not log: kv-curve starts at capacity 0 (everything recomputed), which a log
        # axis cannot place (Vega warns and drops it).
        "x": alt.X(
            "capacity_gb:Q",
            title=f"tier capacity, GB {where} (symlog)",
            scale=alt.Scale(type="symlog"),
            # decades, so labels neither crowd near 0 nor vanish between 0 and the far end
            axis=alt.Axis(values=_decades(df["capacity_gb"], configured)),
        ),
        # explicit ticks so 90 % (where a planner usually reads the curve) is always labelled
        "y": alt.Y(
            "hit_ratio:Q",
            title="hit ratio",
            axis=alt.Axis(format="%", values=[0, 0.25, 0.5, 0.75, 0.9, 1.0]),
            scale=alt.Scale(domain=[0, 1]),
        ),
        "color": alt.Color("tier:N", sort=["hbm", "dram", "ssd"]),
        "tooltip": [
            "tier",
            alt.Tooltip("capacity_gb:Q", format=",.1f", title="GB"),
            alt.Tooltip("hit_ratio:Q", format=".1%"),
        ],
    }
    if by:
        enc["strokeDash"] = f"{by}:N"
    layers = [alt.Chart(df).mark_line(point=True).encode(**enc)]
    if configured is not None and configured.height:
        layers.append(
            alt.Chart(configured)
            .mark_rule(strokeDash=[4, 3], size=2)
            .encode(
                x="capacity_gb:Q",
                color=alt.Color("tier:N", sort=["hbm", "dram", "ssd"]),
                tooltip=[
                    "tier",
                    alt.Tooltip("capacity_gb:Q", format=",.1f", title="configured GB"),
                ],
            )
        )
    title = f"KV hit ratio against capacity {where} (dashed: configured capacity)"
    return alt.layer(*layers, title=title)


def _decades(values: pl.Series, configured: pl.DataFrame | None) -> list[float]:
    top = float(values.max() or 0.0)
    if configured is not None and configured.height:
        top = max(top, float(configured["capacity_gb"].max() or 0.0))
    out, v = [0.0], 1.0
    while v <= top * 1.0001:
        out.append(v)
        v *= 10
    return out
