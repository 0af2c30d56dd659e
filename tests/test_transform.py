"""Trace transforms: load scaling by session replication, context-limit handling (SEED-6)."""

from __future__ import annotations

import math

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from agentx.cli import cli
from agentx.errors import InputError, UsageError
from agentx.testing import trace_objects
from agentx.traces.schema import validate
from agentx.traces.transform import fit_context, over_context, scale_load


@given(trace_objects(with_hashes=True), st.integers(1, 4))
def test_integer_scale_replicates_every_session(tr, k):
    out = scale_load(tr, k)
    validate(out.calls)
    n = tr.calls["session_id"].n_unique()
    assert out.calls.height == k * tr.calls.height
    assert out.calls["session_id"].n_unique() == k * n
    # every copy keeps its session's own spacing of calls (nothing is time-compressed)
    rel = pl.col("t_start_s") - pl.col("t_start_s").min().over("session_id")
    base = pl.col("session_id").str.replace(r"~x\d+$", "")
    got = out.calls.select(base.alias("s"), "call_index", rel.alias("r")).sort(
        "s", "call_index", "r"
    )
    want = pl.concat(
        [tr.calls.select(pl.col("session_id").alias("s"), "call_index", rel.alias("r"))] * k
    ).sort("s", "call_index", "r")
    assert got["r"].to_list() == pytest.approx(want["r"].to_list(), abs=1e-6)


@given(trace_objects(), st.floats(0.05, 4.0, allow_nan=False))
def test_fractional_scale_adds_an_even_share_of_sessions(tr, k):
    out = scale_load(tr, k)
    validate(out.calls)
    n = tr.calls["session_id"].n_unique()
    whole = math.floor(k)
    assert out.calls["session_id"].n_unique() == whole * n + math.floor(n * (k - whole) + 1e-9)


@pytest.mark.parametrize("k", [0, -1, math.inf, math.nan])
def test_scale_rejects_non_positive(k, sample_trace):
    from agentx.traces.io import read_trace

    with pytest.raises(UsageError, match="--load-scale must be a positive number"):
        scale_load(read_trace(sample_trace), k)


@given(trace_objects(with_hashes=True), st.integers(100, 3000))
def test_compact_fits_every_call_whose_output_fits(tr, limit):
    out, rec = fit_context(tr, limit, "compact")
    validate(out.calls)
    df, before = out.calls, tr.calls
    assert df.height == before.height
    # compaction only ever shortens a context, and what is still over cannot be helped:
    # the call's own output alone fills the context
    assert (df["input_tokens"] <= before["input_tokens"]).all()
    still = df.filter(over_context(df, limit))
    assert (still["output_tokens"] >= limit).all()
    assert rec["calls_over_after"] == still.height
    added = int((df["is_compaction"] & ~before["is_compaction"]).sum())
    assert added <= rec["compactions"] <= added + int(before["is_compaction"].sum())
    if rec["compactions"]:
        assert out.hash_scope == "none" and df["block_hashes"].is_null().all()


@given(trace_objects(), st.integers(100, 3000))
def test_drop_removes_exactly_the_calls_over(tr, limit):
    n_over = int(over_context(tr.calls, limit).sum())
    out, rec = fit_context(tr, limit, "drop")
    validate(out.calls)
    assert out.calls.height == tr.calls.height - n_over == tr.calls.height - rec["dropped"]
    assert not over_context(out.calls, limit).any()


def test_error_names_the_first_call(sample_trace):
    from agentx.traces.io import read_trace

    tr = read_trace(sample_trace)
    with pytest.raises(InputError) as err:
        fit_context(tr, 131_072, "error")
    assert "more than the model's 131,072 (use --over-context compact or drop)" in str(err.value)


def test_sample_compacts_like_an_agent(sample_trace):
    """SEED-6 on the bundled Weka sample: 59 calls pass Kimi K2's 131,072 tokens."""
    from agentx.traces.io import read_trace

    tr = read_trace(sample_trace)
    out, rec = fit_context(tr, 131_072, "compact")
    assert rec["calls_over"] == 59 and rec["calls_over_after"] == 0
    assert 0 < rec["compactions"] <= 59
    new = out.calls.filter(pl.col("is_compaction") & ~tr.calls["is_compaction"])
    assert new.height and new["trigger"].eq("compaction").all()
    # the compacted call restarts from the shared prefix plus a ~18.9k-token summary
    assert (new["input_tokens"] <= new["shared_prefix_tokens"] + 18_900).all()


def test_cli_warns_with_the_count_and_compact_silences_it(sample_trace):
    run = CliRunner()
    warned = run.invoke(cli, ["replay", str(sample_trace), "--hw", "b300", "--no-kv-tiers", "-q"])
    assert warned.exit_code == 0
    assert (
        "warning: 59 calls need more than the model's 131,072-token context and are priced as "
        "they are (--over-context compact|drop|error)" in warned.stderr
    )
    compact = run.invoke(
        cli, ["replay", str(sample_trace), "--hw", "b300", "--no-kv-tiers", "-q",
              "--over-context", "compact", "--json"],
    )  # fmt: skip
    assert compact.exit_code == 0 and "warning" not in compact.stderr
    err = run.invoke(cli, ["replay", str(sample_trace), "--hw", "b300", "--over-context", "error"])
    assert err.exit_code == 1 and "Traceback" not in err.output
    assert "more than the model's 131,072" in err.output


def test_replay_load_scale_multiplies_calls(sample_trace):
    import json

    res = CliRunner().invoke(
        cli, ["replay", str(sample_trace), "--hw", "b300", "--no-kv-tiers", "-q", "--json",
              "--load-scale", "2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["calls"] == 2 * 445


@pytest.mark.parametrize("k", [1.9999999999999996, 2.0000000000000004])
def test_scale_one_ulp_from_an_integer_is_that_integer(k, sample_trace):
    # Hypothesis found k = 2 - 1 ulp dropping a session: floor(n * 0.99999...) = n - 1
    from agentx.traces.io import read_trace

    tr = read_trace(sample_trace)
    out = scale_load(tr, k)
    assert out.calls.height == 2 * tr.calls.height
    assert out.calls["session_id"].n_unique() == 2 * tr.calls["session_id"].n_unique()
