"""``agentx kv-curve``: table, run directory, Parquet and JSON outputs, exact errors, exit codes."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from click.testing import CliRunner

from agentx.cli import cli
from agentx.traces.io import write_trace
from agentx.traces.synth import synthesize


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("kv") / "synth.parquet"
    write_trace(synthesize(6, seed=3), p)
    return p


def run(*args):
    return CliRunner().invoke(cli, ["kv-curve", *map(str, args)])


HW = ("--hw", "h200", "--model", "deepseek-v3")


def test_table_parquet_and_json(trace_path, tmp_path):
    out = tmp_path / "curve.parquet"
    r = run(trace_path, *HW, "--capacities-gb", "0,1,10", "-o", out)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].split()[:4] == [
        "tier",
        "capacity_gb",
        "hit_ratio",
        "tier_hit_ratio",
    ]
    curve = pl.read_parquet(out)
    assert curve.height == 9 and curve["tier"].unique().sort().to_list() == ["dram", "hbm", "ssd"]
    hbm = curve.filter(tier="hbm").sort("capacity_bytes")
    assert hbm["hit_ratio"][0] == 0.0 and hbm["hit_ratio"].is_sorted()
    first = out.read_bytes()
    assert run(trace_path, *HW, "--capacities-gb", "0,1,10", "-o", out).exit_code == 0
    assert out.read_bytes() == first  # same input, same bytes
    j = run(trace_path, *HW, "--capacities-gb", "5", "--json", "--policy", "seed7")
    assert j.exit_code == 0, j.output
    doc = json.loads(j.output)
    assert doc["policy"] == "seed7" and len(doc["curve"]) == 3 and doc["gpus"] == 8
    assert doc["block_size_tokens"] == 64 and doc["block_size_note"] == ""


def test_run_directory_joins_sql_and_report(trace_path, tmp_path):
    from agentx.analysis import open_db
    from agentx.analysis.report import build_report
    from agentx.runs import read_run

    runs = tmp_path / "runs"
    r = run(trace_path, *HW, "--capacities-gb", "0,1,10", "-o", runs / "kv", "-q")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (runs / "kv").iterdir()) == [
        "kv_curve.parquet",
        "run.json",
        "summary.json",
    ]
    rd = read_run(runs / "kv")
    assert rd.kind == "kv-curve" and rd.manifest["config"]["hw"] == "h200"
    assert rd.manifest["inputs"]["trace"]["path"] == str(trace_path)
    kv = rd.summary()["kv_tiers"]
    assert kv["block_size_tokens"] == 64 and kv["reused_tokens"] > 0
    assert 0 < kv["hit_ratio"] <= 1 and kv["curve"]["points"] == 3
    curve = rd.table("kv_curve")
    with open_db([], [runs]) as db:
        assert db.query("SELECT * EXCLUDE (run) FROM kv_curve").equals(curve)
        assert db.query("SELECT DISTINCT run FROM kv_curve")["run"].to_list() == ["kv"]
    html, charts = build_report([runs])
    assert "KV hit ratio against capacity" in html
    assert any("hit-ratio-against-capacity" in slug for slug, _ in charts)
    first = (runs / "kv" / "kv_curve.parquet").read_bytes(), (runs / "kv" / "run.json").read_bytes()
    assert run(trace_path, *HW, "--capacities-gb", "0,1,10", "-o", runs / "kv").exit_code == 0
    again = (runs / "kv" / "kv_curve.parquet").read_bytes(), (runs / "kv" / "run.json").read_bytes()
    assert again == first  # same input, same bytes


def test_budget_reblocks_and_says_so(trace_path):
    r = run(trace_path, *HW, "--capacities-gb", "1", "--max-block-refs", "200000")
    assert r.exit_code == 0, r.output
    note = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    m = re.fullmatch(
        r"note: re-blocked from 64 to (\d+) tokens: ([\d,]+) block references exceed the "
        r"budget of 200,000 \(--max-block-refs\); ([\d,]+) at \1",
        note[0],
    )
    assert len(note) == 1 and m, r.stderr
    bs, before, after = int(m[1]), int(m[2].replace(",", "")), int(m[3].replace(",", ""))
    assert bs > 64 and before > 200_000 >= after
    assert f"; {bs}-token blocks (re-blocked: see note)" in r.stdout
    r = run(trace_path, *HW, "--max-block-refs", "10")
    assert r.exit_code == 2
    assert r.output.startswith("Error: the trace needs ") and r.output.strip().endswith(
        "raise --max-block-refs above 10"
    )


def test_unknown_hardware_is_a_usage_error(trace_path):
    r = run(trace_path, "--hw", "gb20")
    assert r.exit_code == 2
    assert r.output.strip() == "Error: unknown hardware 'gb20'; did you mean 'gb200'?"


def test_missing_trace_is_bad_input(tmp_path):
    r = run(tmp_path / "nope.parquet", "--hw", "gb200")
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: {tmp_path / 'nope.parquet'}: no such file"


def test_bad_capacities_and_output_onto_input(trace_path):
    r = run(trace_path, "--capacities-gb", "1,x", "--hw", "gb200")
    assert r.exit_code == 2
    assert r.output.strip() == "Error: --capacities-gb expects comma-separated numbers, got '1,x'"
    r = run(trace_path, "-o", trace_path, "--hw", "gb200")
    assert r.exit_code == 2 and r.output.startswith(
        f"Error: output path '{trace_path}' is the input"
    )
    r = run(trace_path, "-o", trace_path.with_suffix(".pq"), "--hw", "gb200")
    assert r.exit_code == 0, r.output  # a new name without .parquet is a run directory
    r = run(trace_path, "-o", trace_path.with_suffix(".pq") / "run.json", "--hw", "gb200")
    assert r.exit_code == 2 and r.output.strip() == (
        f"Error: -o {trace_path.with_suffix('.pq') / 'run.json'} is a file; give a run "
        "directory, or a name ending in .parquet for the curve alone"
    )
    r = run(trace_path, "--block-size-tokens", "0", "--hw", "gb200")
    assert (
        r.exit_code == 2
        and r.output.strip() == "Error: --block-size-tokens must be positive, got 0"
    )


def test_help_ends_with_an_example():
    r = CliRunner().invoke(cli, ["kv-curve", "--help"])
    assert r.exit_code == 0 and "Example: agentx kv-curve" in r.output


def test_seed7_default_grid_reaches_full_reuse(trace_path):
    """The default grid ends past the largest reuse distance, for seed7's stacks as for lru's."""
    r = run(trace_path, *HW, "--policy", "seed7", "--json", "-q")
    assert r.exit_code == 0, r.output
    curve = pl.DataFrame(json.loads(r.stdout)["curve"])
    assert curve.height == 48  # 16 capacities x 3 tiers
    hbm = curve.filter(tier="hbm").sort("capacity_bytes")
    assert hbm["capacity_bytes"][0] == 0 and hbm["hit_ratio"][-1] == 1.0
