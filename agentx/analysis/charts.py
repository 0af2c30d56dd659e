"""Charts as values: each function takes polars frames (run tables or trace calls) and returns an
altair chart; saving, embedding and export are the caller's job (see ``report``).

Frames are aggregated in polars before they reach altair, so a chart of a 40k-call replay
carries a few hundred rows, not the calls. No selections or named parameters are used:
altair numbers those per process, which would make the same input give different HTML.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from agentx.units import GB

LINKS = ("ssd_to_dram", "dram_to_hbm", "hbm_to_dram", "dram_to_ssd")
# Replays split decode into attention and experts; sweeps report it as one "decode" stage.
STAGE_ORDER = ["prefill", "midfill", "decode", "decode_attention", "decode_experts"]


def _need(df: pl.DataFrame, cols: list[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs columns {missing}; got {df.columns}")


def stage_shares(stages: pl.DataFrame, by: str = "system") -> alt.Chart:
    """Per-stage energy and time shares by ``by`` (system or run), one bar per metric (SEED-22)."""
    _need(stages, [by, "stage", "energy_share", "time_share"], "stage_shares")
    rank = pl.col("stage").replace_strict(
        STAGE_ORDER, range(len(STAGE_ORDER)), default=len(STAGE_ORDER)
    )
    long = (
        stages.select(by, "stage", "energy_share", "time_share")
        .unpivot(index=[by, "stage"], variable_name="metric", value_name="share")
        .with_columns(stage_rank=rank)
    )
    return (
        alt.Chart(long, title="Share of energy and time per stage")
        .mark_bar()
        .encode(
            x=alt.X("share:Q", stack="normalize", axis=alt.Axis(format="%"), title="share"),
            y=alt.Y(f"{by}:N", title=by),
            color=alt.Color("stage:N", sort=STAGE_ORDER),
            order=alt.Order("stage_rank:Q"),
            row=alt.Row("metric:N", title=None),
            tooltip=[by, "stage", alt.Tooltip("share:Q", format=".1%")],
        )
    )


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


# Rows of the replay footprint table that are not slices of the HBM stack.
FOOTPRINT_TOTALS = ("total", "hbm_capacity", "free")


def hbm_footprint(footprint: pl.DataFrame, by: str = "run") -> alt.LayerChart:
    """HBM per GPU by component for each configuration, with the GPU's capacity marked (SEED-21).

    ``footprint`` is the replay table (``component``, ``bytes_per_gpu``) whose ``hbm_capacity``
    row gives the capacity; ``total`` and ``free`` rows are not drawn as slices.
    """
    _need(footprint, [by, "component", "bytes_per_gpu"], "hbm_footprint")
    parts = footprint.filter(~pl.col("component").is_in(list(FOOTPRINT_TOTALS)))
    df = parts.select(by, "component", gb_per_gpu=pl.col("bytes_per_gpu") / GB)
    cap = (
        footprint.filter(pl.col("component") == "hbm_capacity")
        .group_by(by)
        .agg(capacity_gb=pl.col("bytes_per_gpu").max() / GB)
        .sort(by)
    )
    bars = (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("gb_per_gpu:Q", title="GB per GPU"),
            y=alt.Y(f"{by}:N", title=None),
            color="component:N",
            tooltip=[by, "component", alt.Tooltip("gb_per_gpu:Q", format=".1f")],
        )
    )
    ticks = (
        alt.Chart(cap)
        .mark_tick(color="black", thickness=3, size=24)
        .encode(
            x="capacity_gb:Q", y=f"{by}:N", tooltip=[by, alt.Tooltip("capacity_gb:Q", format=".0f")]
        )
    )
    return alt.layer(bars, ticks, title="HBM footprint per GPU against capacity (tick)")


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


def latency_throughput(sweep: pl.DataFrame) -> alt.Chart:
    """Throughput per GPU against per-user speed: each system and GPU count's frontier, per stage."""
    _need(
        sweep,
        ["system", "gpus", "stage", "per_user_tokens_per_s", "tokens_per_s_per_gpu", "fits"],
        "latency_throughput",
    )
    df = (
        pareto_frontier(sweep.filter(pl.col("fits")), ["system", "gpus", "stage"])
        .select(
            "system", "gpus", "stage", "batch_size", "per_user_tokens_per_s", "tokens_per_s_per_gpu"
        )
        .sort("system", "gpus", "stage", "per_user_tokens_per_s")
    )
    return (
        alt.Chart(df, title="Latency–throughput frontier per stage (points that fit in HBM)")
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "per_user_tokens_per_s:Q", title="tokens/s per user", scale=alt.Scale(type="log")
            ),
            y=alt.Y(
                "tokens_per_s_per_gpu:Q", title="tokens/s per GPU", scale=alt.Scale(type="log")
            ),
            color="system:N",
            strokeDash="gpus:N",
            order="per_user_tokens_per_s:Q",
            column=alt.Column("stage:N", sort=STAGE_ORDER, title=None),
            tooltip=[
                "system",
                "gpus",
                "stage",
                "batch_size",
                "per_user_tokens_per_s",
                "tokens_per_s_per_gpu",
            ],
        )
        .properties(width=220, height=200)
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


def frontier(points: pl.DataFrame) -> alt.Chart:
    """Output tokens/s per GPU against tokens/s per user, one line per system: the Pareto
    frontier ``agentx compare`` finds (the chart public inference benchmarks publish)."""
    _need(points, ["hw", "tok_s_per_user", "output_tok_s_per_gpu"], "frontier")
    by = ["run", "hw"] if "run" in points.columns else ["hw"]
    df = points.select(
        *by,
        *[c for c in ("layout", "decode_batch") if c in points.columns],
        "tok_s_per_user",
        "output_tok_s_per_gpu",
    ).sort(*by, "tok_s_per_user")
    return (
        alt.Chart(df, title="Output tokens/s per GPU against tokens/s per user (Pareto frontier)")
        .mark_line(point=True)
        .encode(
            x=alt.X("tok_s_per_user:Q", title="tokens/s per user", scale=alt.Scale(type="log")),
            y=alt.Y(
                "output_tok_s_per_gpu:Q",
                title="output tokens/s per GPU",
                scale=alt.Scale(type="log"),
            ),
            color=alt.Color("hw:N", title="system"),
            order="tok_s_per_user:Q",
            tooltip=[c for c in df.columns if c != "run"],
        )
    )


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
