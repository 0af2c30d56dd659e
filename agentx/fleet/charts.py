"""Charts of a fleet run (altair; each function returns an ``alt.Chart``)."""

from __future__ import annotations

import altair as alt
import polars as pl


def load_per_replica(replica_load: pl.DataFrame, measure: str = "utilization") -> alt.Chart:
    """Load of each replica over time from a run's ``replica_load`` table: ``utilization``
    (instance-seconds of work arriving per second of the bucket), ``work_s`` or ``calls``."""
    df = replica_load.with_columns(pl.col("replica").cast(pl.String))
    return (
        alt.Chart(df)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("bucket_start_s:Q", title="time from trace start (s)"),
            y=alt.Y(f"{measure}:Q", title=measure.replace("_", " ")),
            color=alt.Color("replica:N", title="replica"),
            tooltip=["replica", "bucket_start_s", "calls", "work_s", "utilization"],
        )
        .properties(title="Load per replica over time", width=600, height=250)
    )
