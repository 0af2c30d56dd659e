"""The synthetic agentic generator, its --like fit and the ``agentx synth`` command."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.cli import cli
from agentx.errors import UnknownNameError, UsageError
from agentx.traces import read_trace, write_trace
from agentx.traces.fit import REPORTED, fit_params, fit_report, ks_distance, samples, share_report
from agentx.traces.schema import COLUMN_NAMES, validate
from agentx.traces.synth import SynthParams, synthesize


def _by_agent(df: pl.DataFrame) -> pl.DataFrame:
    agent = ["session_id", "agent_id"]
    return df.with_columns(
        prev_input=pl.col("input_tokens").shift(1).over(agent),
        k=pl.int_range(pl.len()).over(agent),
    )


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n=st.integers(1, 25),
    limit=st.integers(40_000, 1_500_000),
    sub_share=st.sampled_from([0.0, 0.3, 1.0]),
    by_calls=st.booleans(),
)
def test_invariants_hold_for_any_seed_and_limit(seed, n, limit, sub_share, by_calls):
    size = {"n_calls": 40 * n} if by_calls else {"n_sessions": n}
    df = synthesize(
        **size, seed=seed, context_limit_tokens=limit, subagent_session_share=sub_share
    ).calls
    validate(df)
    if by_calls:
        assert df.height == 40 * n
    else:
        assert df["session_id"].n_unique() == n
    assert df["input_tokens"].max() <= limit  # SEED-6: compaction keeps the context under it
    d = _by_agent(df)
    first = d.filter(pl.col("k") == 0)
    assert (first["reused_prefix_tokens"] == 0).all() and not first["is_compaction"].any()
    later = d.filter(pl.col("k") > 0)
    grow = later.filter(~pl.col("is_compaction"))
    # Between compactions the context only grows, and reuse never reaches past the previous prompt.
    assert (grow["input_tokens"] > grow["prev_input"]).all()
    assert (grow["reused_prefix_tokens"] <= grow["prev_input"]).all()
    comp = later.filter(pl.col("is_compaction"))
    assert (comp["reused_prefix_tokens"] == comp["shared_prefix_tokens"]).all()
    assert (comp["trigger"] == "compaction").all()
    assert (df["source"] == "synth").all() and df["block_hashes"].is_null().all()


def test_same_seed_same_bytes_other_seed_other_trace(tmp_path):
    a, b = synthesize(60, seed=7), synthesize(60, seed=7)
    assert a.calls.equals(b.calls) and a.meta == b.meta
    write_trace(a, tmp_path / "a.parquet")
    write_trace(b, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert not synthesize(60, seed=8).calls.equals(a.calls)
    meta = read_trace(tmp_path / "a.parquet").meta
    assert meta["agentx.source"] == "synth" and meta["agentx.hash_scope"] == "none"
    assert json.loads(meta["agentx.importer_options"])["seed"] == 7


def test_low_limit_compacts_and_restarts_from_prefix_plus_summary():
    df = synthesize(80, seed=1, context_limit_tokens=60_000, subagent_session_share=0.0).calls
    d = _by_agent(df).filter(pl.col("is_compaction"))
    assert d.height > 50
    assert (d["input_tokens"] < d["prev_input"]).all()  # the prompt shrank sharply
    assert (d["new_tokens"] <= (60_000 - d["shared_prefix_tokens"]) // 2).all()  # the summary


def test_subagents_run_inside_their_parent_session_while_it_waits():
    df = synthesize(30, seed=2, subagent_session_share=1.0).calls
    subs = df.filter(pl.col("agent_id").is_not_null())
    assert subs["session_id"].n_unique() == 30
    firsts = _by_agent(subs).filter(pl.col("k") == 0)
    assert (firsts["trigger"] == "subagent").all()
    assert (subs["shared_prefix_tokens"] == SynthParams().subagent_shared_prefix_tokens).all()
    # The parent's next call comes after the sub-agent's last call: it waited for the result
    # (sub-agents spawned by the same parent call run side by side; the parent waits for all).
    spans = subs.group_by("session_id", "agent_id").agg(
        lo=pl.col("call_index").min(), hi=pl.col("call_index").max()
    )
    main = df.filter(pl.col("agent_id").is_null())
    waited = 0
    for sid, lo, hi in spans.select("session_id", "lo", "hi").iter_rows():
        later = main.filter((pl.col("session_id") == sid) & (pl.col("call_index") > lo))[
            "call_index"
        ]
        if later.len():
            assert later.min() > hi
            waited += 1
    assert waited > 0


def test_exact_call_count_and_poisson_arrivals():
    tr = synthesize(n_calls=5_000, seed=4, session_rate_per_s=0.5)
    validate(tr.calls)
    assert tr.calls.height == 5_000
    starts = (
        tr.calls.group_by("session_id")
        .agg(pl.col("t_start_s").min())["t_start_s"]
        .sort()
        .to_numpy()
    )
    assert starts[0] == 0.0
    many = synthesize(3_000, seed=4, session_rate_per_s=0.5).calls
    t0 = many.group_by("session_id").agg(pl.col("t_start_s").min())["t_start_s"].sort().to_numpy()
    assert np.diff(t0).mean() == pytest.approx(2.0, rel=0.08)


def test_defaults_reproduce_the_weka_medians():
    """SOURCES.md §2: calls/session p50 47, first input 24,775, appended 733, output 217, think 10 s."""
    s = samples(synthesize(3_000, seed=11))
    med = {k: float(np.median(v)) for k, v in s.items() if v.size}
    assert med["calls_per_session"] == pytest.approx(47, rel=0.10)
    assert med["first_input_tokens"] == pytest.approx(24_775, rel=0.20)
    assert med["appended_tokens"] == pytest.approx(733, rel=0.10)
    assert med["output_tokens"] == pytest.approx(217, rel=0.05)
    assert med["think_time_s"] == pytest.approx(10, rel=0.20)
    assert np.percentile(s["output_tokens"], 90) == pytest.approx(894, rel=0.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"contxt_limit_tokens": 5},
            "unknown synth parameter 'contxt_limit_tokens'; did you mean 'context_limit_tokens'?",
        ),
        ({"output_tokens_p90": 10}, "synth parameter output_tokens_p90 must be ≥ its p50, got 10"),
        (
            {"user_turn_share": 1.5},
            "synth parameter user_turn_share must be a share in [0, 1], got 1.5",
        ),
        (
            {"context_limit_tokens": 20_000},
            "synth parameter context_limit_tokens must be at least twice the shared prefix + 2 (29,652 tokens), got 20,000",
        ),
        (
            {"output_tokens_p50": float("nan")},
            "synth parameter output_tokens_p50 must be a finite number ≥ 0, got nan",
        ),
    ],
)
def test_bad_parameters_name_the_knob(kwargs, message):
    with pytest.raises(UsageError) as err:
        synthesize(3, **kwargs)
    assert str(err.value) == message
    if "contxt" in message:
        assert isinstance(err.value, UnknownNameError)


def test_ks_distance_bounds():
    a = np.arange(100.0)
    assert ks_distance(a, a) == 0.0
    assert ks_distance(a, a + 1000) == 1.0
    assert ks_distance(a, np.array([])) is None


def test_fit_recovers_the_parameters_of_a_synthetic_trace():
    truth = SynthParams(
        output_tokens_p50=400,
        output_tokens_p90=1_500,
        tool_think_time_s_p50=4,
        early_limit_share=0.5,
        early_limit_tokens=150_000,
        subagent_session_share=0.2,
        resumed_session_share=0.3,
    )
    real = synthesize(800, seed=3, params=truth)
    fit = fit_params(real)
    assert fit.output_tokens_p50 == pytest.approx(400, rel=0.05)
    assert fit.output_tokens_p90 == pytest.approx(1_500, rel=0.05)
    assert fit.tool_think_time_s_p50 == pytest.approx(4, rel=0.05)
    assert fit.tool_appended_tokens_p50 == pytest.approx(733, rel=0.05)
    assert fit.resumed_session_share == pytest.approx(0.3, abs=0.05)
    assert fit.subagent_session_share == pytest.approx(0.2, abs=0.05)
    assert fit.early_limit_tokens == pytest.approx(150_000, rel=0.02)
    assert fit.early_limit_share == pytest.approx(0.5, abs=0.15)
    assert fit.prefix_break_share == pytest.approx(truth.prefix_break_share, abs=0.005)
    report = fit_report(real, synthesize(800, seed=4, params=fit))
    assert report["quantity"].to_list() == list(REPORTED)
    assert report.columns[-1] == "ks_distance" and report.null_count().sum_horizontal().item() == 0
    assert (report["ks_distance"] < 0.12).all()


@pytest.mark.slow
def test_like_fits_the_real_weka_trace(weka_parquet):
    """The look-alike of the 603 real sessions: medians within 10 %, shares within 1 point."""
    # The fixture validated the file; the fit reads no block hashes, so skip their bytes.
    real = pl.read_parquet(weka_parquet, columns=[c for c in COLUMN_NAMES if c != "block_hashes"])
    synth = synthesize(603, seed=0, params=fit_params(real))
    rep = {r["quantity"]: r for r in fit_report(real, synth).iter_rows(named=True)}
    for q in ("output_tokens", "appended_tokens", "calls_per_session", "input_tokens"):
        assert rep[q]["synth_p50"] == pytest.approx(rep[q]["real_p50"], rel=0.10), q
    assert rep["output_tokens"]["ks_distance"] < 0.2
    assert rep["calls_per_session"]["ks_distance"] < 0.12
    shares = dict(
        share_report(real, synth).select("quantity", pl.concat_list("real", "synth")).iter_rows()
    )
    assert shares["subagent_session_share"][1] == pytest.approx(
        shares["subagent_session_share"][0], abs=0.01
    )
    assert shares["prefix_break_share"][1] == pytest.approx(
        shares["prefix_break_share"][0], abs=0.005
    )
    assert (
        shares["compactions_per_1k_calls"][1] > 1.0
    )  # the fitted early limit compacts (real: 4.5)


# --- the command -------------------------------------------------------------------------


def _run(*args: object):
    return CliRunner().invoke(cli, ["synth", *map(str, args)])


def test_cli_writes_a_valid_trace_and_a_summary(tmp_path):
    out = tmp_path / "s.parquet"
    res = _run(
        "-o", out, "--sessions", 20, "--seed", 5, "--context-limit-tokens", 100_000, "--json"
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)["summary"]
    tr = read_trace(out)
    assert summary["sessions"] == 20 and summary["calls"] == tr.calls.height
    assert summary["max_input_tokens"] <= 100_000 and summary["compactions"] > 0
    again = tmp_path / "again.parquet"
    assert (
        _run(
            "-o", again, "--sessions", 20, "--seed", 5, "--context-limit-tokens", 100_000
        ).exit_code
        == 0
    )
    assert again.read_bytes() == out.read_bytes()
    assert _run("-o", out, "--calls", 777).exit_code == 0 and read_trace(out).calls.height == 777


def test_cli_like_prints_the_fit(tmp_path):
    real = tmp_path / "real.parquet"
    write_trace(synthesize(150, seed=1, output_tokens_p50=300, output_tokens_p90=900), real)
    res = _run("-o", tmp_path / "look.parquet", "--like", real, "--json")
    assert res.exit_code == 0, res.output
    obj = json.loads(res.output)
    assert obj["summary"]["sessions"] == 150
    rows = {r["quantity"]: r for r in obj["fit"]}
    assert rows["output_tokens"]["synth_p50"] == pytest.approx(300, rel=0.1)
    assert {r["quantity"] for r in obj["shares"]} >= {
        "subagent_session_share",
        "compactions_per_1k_calls",
    }
    table = _run("-o", tmp_path / "look2.parquet", "--like", real, "--sessions", 10)
    assert table.exit_code == 0 and "ks_distance" in table.output and "Fit to" in table.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sessions", 5, "--calls", 9], "Error: use --sessions or --calls, not both"),
        (["--sessions", 0], "Error: --sessions must be a positive integer, got 0"),
        (["--calls", -3], "Error: --calls must be a positive integer, got -3"),
        (["--seed", -1], "Error: --seed must be a non-negative integer, got -1"),
        (
            ["--rate-per-s", 0],
            "Error: --rate-per-s must be a positive number of sessions per second, got 0.0",
        ),
        (
            ["--context-limit-tokens", 1000],
            "Error: --context-limit-tokens must be at least twice the shared prefix + 2 (29,652 tokens), got 1,000",
        ),
    ],
)
def test_cli_bad_values_are_usage_errors(tmp_path, args, message):
    out = tmp_path / "x.parquet"
    res = _run("-o", out, *args)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == message
    assert not out.exists()


def test_cli_refuses_to_overwrite_the_like_input_and_reports_bad_files(tmp_path):
    real = tmp_path / "real.parquet"
    write_trace(synthesize(5, seed=1), real)
    before = real.read_bytes()
    res = _run("-o", real, "--like", real)
    assert res.exit_code == 2
    assert (
        res.output.strip()
        == f"Error: output path '{real}' is the input '{real}'; choose another -o"
    )
    assert real.read_bytes() == before
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    res = _run("-o", tmp_path / "o.parquet", "--like", bad)
    assert res.exit_code == 1 and res.output.startswith(
        f"Error: {bad}: not a readable Parquet file"
    )


def test_cli_help_ends_with_an_example():
    res = CliRunner().invoke(cli, ["synth", "--help"])
    assert res.exit_code == 0
    assert res.output.strip().split("\n\n")[-1].strip().startswith("Example: agentx synth -o")


# --- streamed synth: chunks of whole sessions, memory independent of the trace size ----------


def test_cli_streams_the_in_memory_trace_byte_for_byte_when_it_fits_one_chunk(tmp_path):
    """A trace within one chunk is drawn and written exactly as the in-memory path does."""
    from agentx.cli.cmd_synth import _summary

    for args, kw in (
        (["--sessions", 40, "--seed", 3], {"n_sessions": 40}),
        (["--calls", 3_000, "--seed", 3], {"n_calls": 3_000}),
    ):
        out, ref = tmp_path / "cli.parquet", tmp_path / "ref.parquet"
        res = _run("-o", out, *args, "--json")
        assert res.exit_code == 0, res.output
        trace = synthesize(**kw, seed=3)
        write_trace(trace, ref)
        assert out.read_bytes() == ref.read_bytes()
        got = json.loads(res.output)["summary"]
        want = _summary(trace.calls, out, 0.0)
        assert {k: v for k, v in got.items() if k != "elapsed_s"} == {
            k: v for k, v in want.items() if k != "elapsed_s"
        }


@settings(max_examples=12, deadline=None)
@given(
    chunk=st.integers(1, 3_000),
    n=st.integers(1, 6_000),
    seed=st.integers(0, 2**16),
    by_calls=st.booleans(),
)
def test_chunked_traces_are_valid_exact_and_reproducible(
    tmp_path_factory, chunk, n, seed, by_calls
):
    """Any chunk size: a valid trace of exactly the calls (or sessions) asked, sessions whole
    within one chunk and starting in order, same seed -> same bytes, and the streamed CLI
    summary equals the one of the whole frame."""
    import agentx.traces.synth as sy
    from agentx.cli.cmd_synth import _Summary, _summary
    from agentx.traces.io import write_trace_chunks

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sy, "CHUNK_CALLS", chunk)
        mp.setattr(sy, "CHUNK_SESSIONS", max(chunk // 60, 1))
        kw = {"n_calls": n} if by_calls else {"n_sessions": max(n // 60, 1)}
        df = sy.synthesize(**kw, seed=seed).calls
        validate(df)
        if by_calls:
            assert df.height == n
        else:
            assert df["session_id"].n_unique() == kw["n_sessions"]
        starts = df.group_by("session_id", maintain_order=True).agg(pl.col("t_start_s").min())
        assert starts["session_id"].is_sorted() and starts["t_start_s"].is_sorted()
        d = tmp_path_factory.mktemp("s")
        acc = _Summary()
        for name in ("a.parquet", "b.parquet"):
            chunks, meta = sy.synth_chunks(**kw, seed=seed)
            write_trace_chunks(
                chunks, meta, d / name, on_chunk=acc.add if name == "a.parquet" else None
            )
        assert (d / "a.parquet").read_bytes() == (d / "b.parquet").read_bytes()
        assert read_trace(d / "a.parquet").calls.equals(df)
        want = _summary(df, d, 0.0)
        assert acc.result(d, 0.0) == want


def test_streamed_synth_checks_the_call_limit_per_chunk(tmp_path, monkeypatch):
    """AGENTX_MAX_CALLS bounds memory, so it applies to each chunk; the total is bounded by
    AGENTX_MAX_CALLS_STREAMED (time and disk)."""
    import agentx.traces.synth as sy

    out = tmp_path / "s.parquet"
    monkeypatch.setattr(sy, "CHUNK_CALLS", 2_000)
    monkeypatch.setenv("AGENTX_MAX_CALLS", "3000")
    res = _run("-o", out, "--calls", 5_000, "--json")
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(out).height == 5_000
    monkeypatch.setenv("AGENTX_MAX_CALLS_STREAMED", "4999")
    res = _run("-o", tmp_path / "t.parquet", "--calls", 5_000)
    assert res.exit_code == 1 and not (tmp_path / "t.parquet").exists()
    assert res.output.strip() == (
        "Error: --calls: 5,000 calls generated by one command is past the limit of 4,999 "
        "(set AGENTX_MAX_CALLS_STREAMED to raise it, if the machine has the time and disk)"
    )
