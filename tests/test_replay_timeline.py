"""The merge's whole-trace figures: quantiles equal polars' linear quantile exactly, and the
resident-KV peak's tie order equals a stable sort's."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.replay.timeline import QUANTILES, _sorted_with, order_statistics, quantiles

finite = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, max_size=300), st.lists(st.floats(0, 1), min_size=1, max_size=5))
def test_quantiles_equal_polars_linear(values, qs):
    a = np.array(values, dtype=np.float64)
    want = [float(pl.Series(a).quantile(q, interpolation="linear")) if a.size else 0.0 for q in qs]
    assert quantiles(a, qs) == want


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.integers(-3, 3).map(float), st.just(float("nan"))), min_size=1, max_size=60
    ),
    st.data(),
)
def test_order_statistics_are_the_sorted_values_at_the_ranks(values, data):
    """Ranks one after another (a quantile's floor and ceiling), apart, first and last, with
    ties and NaN (sorted last): the values ``np.sort`` puts there."""
    a = np.array(values)
    ranks = sorted(data.draw(st.sets(st.integers(0, a.size - 1), min_size=1)))
    got = order_statistics(a, ranks)
    want = np.sort(a)[ranks]
    np.testing.assert_array_equal(np.array(got), want)  # NaN equals NaN here
    assert np.array_equal(a, np.array(values), equal_nan=True)  # the input is left as it was


@settings(max_examples=100, deadline=None)
@given(st.lists(finite, min_size=1, max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_quantiles_of_pieces_equal_those_of_the_whole(values, cuts):
    """The merge hands the partitions' latency pieces over as they are (no whole copy)."""
    a = np.array(values)
    pieces = np.split(a, sorted(min(c, a.size) for c in cuts))
    assert quantiles(pieces) == quantiles(a)
    assert order_statistics(pieces, [0, a.size - 1]) == [a.min(), a.max()]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=400))
def test_sorted_with_equals_a_stable_argsort(times):
    t = np.array(times, dtype=np.float64) / 4  # many ties
    ctx = np.arange(t.size, dtype=np.float64)  # distinct: any other order of a tie shows
    order = np.argsort(t, kind="stable")
    ts, cs = _sorted_with(t, (ctx,), step=7)
    assert np.array_equal(ts, t[order]) and np.array_equal(cs, ctx[order])
    ints = np.arange(t.size, dtype=np.int64)
    _, twice = _sorted_with(t, (ints, ints), step=5)  # parts add up, as float64
    assert np.array_equal(twice, 2.0 * ctx[order])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=400), st.integers(0, 2**32 - 1))
def test_sorted_with_a_given_time_order_equals_its_own_sort(times, seed):
    """The HBM peak's arrivals from the KV geometry's time order (ties by session and call,
    here in any order) equal those from a sort of their own: the ties go back to row order."""
    t = np.array(times, dtype=np.float64) / 4
    ctx = np.arange(t.size, dtype=np.float64)
    by_time = np.lexsort((np.random.default_rng(seed).permutation(t.size), t)).astype(np.int32)
    given_order = by_time.copy()
    ts, cs = _sorted_with(t, (ctx,), step=7, by_time=by_time)
    order = np.argsort(t, kind="stable")
    assert np.array_equal(ts, t[order]) and np.array_equal(cs, ctx[order])
    assert np.array_equal(by_time, given_order)  # the caller's order is not changed


special = st.sampled_from([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324])


@settings(max_examples=200, deadline=None)
@given(st.lists(finite | special, max_size=300))
def test_fast_sorts_with_ties_resorted_equal_a_stable_argsort(values):
    """``order.argsort`` (polars) and ``order.argsort_times`` (numpy's quicksort, or its stable
    sort on AMD Zen 4), then ``resort_ties``, are numpy's stable argsort, NaN last, infinities
    and -0.0 (equal to 0.0) included; ``order.sort`` sorts as numpy does."""
    from agentx.kv import order

    t = np.array(values, dtype=np.float64)
    want = np.argsort(t, kind="stable")
    nan = np.isnan(t[want])
    for fast in (order.argsort, order.argsort_times):
        got = fast(t)
        assert got.flags.writeable and got.dtype.kind in "iu"
        order.resort_ties(got, t[got])
        # NaNs never equal each other, so resort_ties leaves their run as the sort gave it
        assert np.array_equal(got[~nan], want[~nan]) and np.isnan(t[got[nan]]).all()
    assert np.array_equal(order.sort(t), np.sort(t), equal_nan=True)


def test_time_sort_kind_follows_the_cpu(tmp_path, monkeypatch):
    """The stable sort on AMD family 25 with AVX-512 (Zen 4), the quicksort elsewhere."""
    import builtins

    from agentx.kv import order

    real_open = builtins.open

    def cpu(vendor, family, flags):
        text = f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nflags\t\t: {flags}\n\nprocessor\t: 1\n"
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        monkeypatch.setattr(
            builtins,
            "open",
            lambda p, *a, **k: real_open(path if p == "/proc/cpuinfo" else p, *a, **k),
        )
        return order._microcoded_compress()

    assert cpu("AuthenticAMD", 25, "fpu avx2 avx512f avx512bw")  # Zen 4
    assert not cpu("AuthenticAMD", 25, "fpu avx2")  # Zen 3: no AVX-512
    assert not cpu("AuthenticAMD", 26, "fpu avx2 avx512f")  # Zen 5
    assert not cpu("GenuineIntel", 6, "fpu avx2 avx512f")


def test_quantiles_of_a_big_array_with_ties_equal_polars():
    rng = np.random.default_rng(7)
    a = np.round(rng.lognormal(0, 2, 100_003), 2)
    want = [float(pl.Series(a).quantile(q, interpolation="linear")) for q in QUANTILES]
    assert quantiles(a) == want


def test_calls_writer_raises_a_failed_write_and_leaves_no_file(tmp_path):
    import pytest

    from agentx.replay.callsfile import write_calls
    from agentx.replay.replay import Partial

    def part(values) -> Partial:
        frame = pl.DataFrame({"t_start_s": values, "input_tokens": [1] * len(values)})
        frame = frame.with_columns(output_tokens=1, ttft_s=1.0, decode_latency_s=1.0)
        return Partial(frame, np.zeros(1), 1, {}, 0)

    good, bad = part([1.0, 2.0]), part(["x", "y"])  # a string cannot become the file's float
    out = tmp_path / "calls.parquet"
    with pytest.raises(Exception, match="(?i)float|double|convert|parse"):
        for _ in write_calls(iter([good, bad, good, good]), out):
            pass
    assert not list(tmp_path.iterdir())
    list(write_calls(iter([good, good]), out))
    assert pl.read_parquet(out)["t_start_s"].to_list() == [1.0, 2.0, 1.0, 2.0]


def test_calls_writer_codecs_per_column_kind(tmp_path):
    """Integers delta-encoded then lz4, strings dictionary and zstd; floats: plain and lz4
    where over half zeros (no dictionary), dictionary and lz4 where few-valued, else plain and
    uncompressed (chosen on the first frame and kept); only start times (and session ids)
    carry statistics, not counts, costs or agents; the metadata is the file's, no Arrow
    schema is stored; values round-trip."""
    import pyarrow.parquet as pq

    from agentx.replay.callsfile import DICTIONARY_PAGE_BYTES, CallsWriter

    n = DICTIONARY_PAGE_BYTES // 8 + 2000  # more distinct values than a dictionary page holds
    frame = pl.DataFrame(
        {
            "input_tokens": np.arange(n),
            "ttft_s": np.linspace(0.1, 9.0, n),  # dense
            "prefill_time_s": np.where(np.arange(n) % 10 == 0, 1.5, 0.0),  # mostly zeros
            "agent_id": ["main", "sub"] * (n // 2),
            "decode_experts_time_s": np.arange(n) % 7 * 0.25,  # few distinct values
            "t_start_s": np.linspace(0.0, 1.0, n),  # a trace column
            "kv_dram_to_hbm_bytes": np.where(np.arange(n) % 10 < 6, 0.0, np.arange(n) * 8.0),
        }
    )
    with CallsWriter(tmp_path / "c.parquet", {"agentx.table": "calls"}) as w:
        w.write(frame)
        w.write(frame.with_columns(prefill_time_s=pl.lit(2.0)))  # codecs stay the first's
    f = pq.ParquetFile(tmp_path / "c.parquet")
    md = f.metadata
    assert md.metadata == {b"agentx.table": b"calls"}
    lz4 = ("LZ4_RAW", "LZ4")
    for g in range(md.num_row_groups):
        col = [md.row_group(g).column(j) for j in range(7)]
        assert col[0].compression in lz4 and "BYTE_STREAM_SPLIT" in col[0].encodings
        assert col[1].compression == col[5].compression == "UNCOMPRESSED"
        assert col[2].compression in lz4 and col[6].compression in lz4
        assert col[3].compression == "ZSTD" and "RLE_DICTIONARY" in col[3].encodings
        assert col[4].compression in lz4 and "RLE_DICTIONARY" in col[4].encodings
        for c in (col[1], col[2], col[5], col[6]):
            assert not any("DICTIONARY" in e for e in c.encodings)
        assert [c.is_stats_set for c in col] == [False, False, False, False, False, True, False]
        stats = col[5].statistics
        assert (stats.min, stats.max) == (0.0, 1.0)
    back = pl.read_parquet(tmp_path / "c.parquet")
    assert back.equals(pl.concat([frame, frame.with_columns(prefill_time_s=pl.lit(2.0))]))
    # agentx sql's DuckDB reads the split integers too
    got = duckdb.sql(f"SELECT sum(input_tokens) FROM '{tmp_path / 'c.parquet'}'").fetchall()
    assert got == [(2 * int(frame["input_tokens"].sum()),)]


def test_session_ids_one_dictionary_entry_per_session():
    """Integer session codes leave as a dictionary of the partition's sessions, in order
    (a code seen again after another falls back to the gathered strings); either way the
    values are the ids."""
    import pyarrow as pa

    from agentx.replay.callsfile import session_ids

    names = pl.Series(["s-a", "s-b", "s-c", "s-d"])
    ids = session_ids(np.array([2, 2, 0, 0, 0, 3], np.uint32), names)
    assert pa.types.is_dictionary(ids.type)
    assert ids.dictionary.to_pylist() == ["s-c", "s-a", "s-d"]
    assert ids.indices.to_pylist() == [0, 0, 1, 1, 1, 2]
    back = session_ids(np.array([1, 0, 1], np.uint32), names)
    assert not pa.types.is_dictionary(back.type)
    assert back.to_pylist() == ["s-b", "s-a", "s-b"]
    assert session_ids(np.zeros(0, np.uint32), names).to_pylist() == []


def test_calls_writer_keeps_session_id_ranges_per_row_group(tmp_path):
    """Session ids (handed over as codes, written as a dictionary of each partition's
    sessions) keep their min/max per row group: a reader looking up one session skips the
    groups whose range misses it."""
    import pyarrow.parquet as pq

    from agentx.replay.callsfile import CallsWriter

    names = pl.Series(["s0", "s1", "s2", "s3"])
    frame = pl.DataFrame({"session_id": np.array([0, 0, 1], np.uint32), "input_tokens": [1, 2, 3]})
    with CallsWriter(tmp_path / "c.parquet", session_names=names) as w:
        w.write(frame)
        w.write(frame.with_columns(session_id=np.array([2, 3, 3], np.uint32)))
    md = pq.ParquetFile(tmp_path / "c.parquet").metadata
    got = [(md.row_group(g).column(0).statistics.min, md.row_group(g).column(0).statistics.max) for g in range(2)]  # fmt: skip
    assert got == [("s0", "s1"), ("s2", "s3")]
    assert not md.row_group(0).column(1).is_stats_set


def _partials(n: int, rows: int = 3):
    from agentx.replay.replay import Partial

    for i in range(n):
        frame = pl.DataFrame({"t_start_s": np.arange(rows) + 10.0 * i, "input_tokens": [1] * rows})
        frame = frame.with_columns(output_tokens=1, ttft_s=1.0, decode_latency_s=1.0)
        yield Partial(frame, np.zeros(1), 1, {}, 0)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 5), st.integers(1, 4))
def test_a_file_closed_by_the_callers_stack_has_the_same_bytes(tmp_path_factory, n, rows):
    from contextlib import ExitStack

    from agentx.replay.callsfile import write_calls

    tmp = tmp_path_factory.mktemp("w")
    list(write_calls(_partials(n, rows), tmp / "a.parquet"))
    with ExitStack() as stack:
        slims = list(write_calls(_partials(n, rows), tmp / "b.parquet", finish=stack))
        assert len(slims) == n  # the merge has every partial before the file is closed
    assert (tmp / "a.parquet").read_bytes() == (tmp / "b.parquet").read_bytes()


def test_a_failure_before_the_callers_stack_closes_leaves_no_file(tmp_path):
    from contextlib import ExitStack

    import pytest

    from agentx.replay.callsfile import write_calls

    with pytest.raises(RuntimeError, match="^merge failed$"), ExitStack() as stack:
        list(write_calls(_partials(3), tmp_path / "c.parquet", finish=stack))
        raise RuntimeError("merge failed")
    assert not list(tmp_path.iterdir())
