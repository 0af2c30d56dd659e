"""Broken traces for the tests of every reader that validates (agentx.traces.batches, the
out-of-core partitions): a small synthetic trace, one rule broken at a chosen row."""

from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq
from hypothesis import strategies as st

from agentx.traces.synth import synthesize

TRACE = synthesize(12, seed=5)
N = TRACE.calls.height


def write_groups(df: pl.DataFrame, path, group_rows: int) -> None:
    table = df.to_arrow().replace_schema_metadata(
        {k.encode(): v.encode() for k, v in {"agentx.schema_version": "1", **TRACE.meta}.items()}
    )
    pq.write_table(table, path, row_group_size=group_rows, compression="zstd")


def set_at(col: str, row: int, value) -> pl.Expr:
    return pl.when(pl.int_range(pl.len()) == row).then(value).otherwise(pl.col(col)).alias(col)


MUTATIONS = {
    "negative output": lambda r: set_at("output_tokens", r, -1),
    "nan time": lambda r: set_at("t_start_s", r, float("nan")),
    "time goes back": lambda r: set_at("t_start_s", r, -5.0),
    "reused over input": lambda r: set_at("reused_prefix_tokens", r, pl.col("input_tokens") + 1),
    "new tokens off": lambda r: set_at("new_tokens", r, pl.col("new_tokens") + 1),
    "call index gap": lambda r: set_at("call_index", r, pl.col("call_index") + 1),
    "null trigger": lambda r: set_at("trigger", r, pl.lit(None, pl.String)),
    "null source": lambda r: set_at("source", r, pl.lit(None, pl.String)),
    "null session": lambda r: set_at("session_id", r, pl.lit(None, pl.String)),
    "negative think time": lambda r: set_at("think_time_s", r, -1.0),
    "zero block size": lambda r: set_at("block_size_tokens", r, 0),
    "hashes without size": lambda r: set_at(
        "block_hashes", r, pl.lit([1, 2], dtype=pl.List(pl.UInt64))
    ),
    "session elsewhere": lambda r: set_at("session_id", r, pl.lit(TRACE.calls["session_id"][0])),
    "null input": lambda r: set_at("input_tokens", r, pl.lit(None, pl.Int64)),
    "infinite think time": lambda r: set_at("think_time_s", r, float("inf")),
    # one row with block hashes in a trace without: the rules on hashes must still run there
    "hash count off": lambda r: [
        set_at("block_size_tokens", r, 16),
        set_at("block_hashes", r, pl.lit([1], dtype=pl.List(pl.UInt64))),
    ],
    "hashes right": lambda r: [
        set_at("block_size_tokens", r, 16),
        set_at(
            "block_hashes",
            r,
            pl.int_ranges((pl.col("input_tokens") + 15) // 16).cast(pl.List(pl.UInt64)),
        ),
    ],
}

# the arguments of a test over broken files: the mutation, its row, rows per row group, and
# rows per batch (or partition) of the reader
CASES = (
    st.sampled_from(sorted(MUTATIONS)),
    st.integers(0, N - 1),
    st.integers(1, N),
    st.integers(1, N + 5),
)


def broken_file(tmp_path, kind: str, row: int, group_rows: int):
    """(path, what ``read_trace`` makes of it: the Trace, or the InputError it raises) of
    ``TRACE`` with mutation ``kind`` at ``row``, in row groups of ``group_rows``."""
    from agentx.errors import InputError
    from agentx.traces.io import read_trace

    path = tmp_path / "t.parquet"
    write_groups(TRACE.calls.with_columns(MUTATIONS[kind](row)), path, group_rows)
    try:
        return path, read_trace(path)
    except InputError as err:
        return path, err
