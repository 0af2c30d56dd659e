"""Charts of what serving costs: energy and time per stage, HBM footprint against capacity,
and the latency-throughput frontiers of sweeps and of ``agentx compare``.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from agentx.analysis.charts_frames import STAGE_ORDER, _need, pareto_frontier
from agentx.units import GB


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
