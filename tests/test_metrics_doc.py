"""docs/metrics.md defines every column of every table a run writes (the brief's metrics page)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from agentx.cli import cli

DOC = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
STAGES = ("prefill", "midfill", "decode_attention", "decode_experts")


def _documented(col: str) -> bool:
    if re.search(rf"(?<![\w{{]){re.escape(col)}(?!\w)", DOC):
        return True
    for st in STAGES:  # per-stage columns are documented once as {stage}_x / {fill}_x / stage_x
        if col.startswith(st + "_"):
            rest = col[len(st) + 1 :]
            forms = [f"{{stage}}_{rest}", f"{st}_{rest}"]
            if st in ("prefill", "midfill"):
                forms.append(f"{{fill}}_{rest}")
            return any(f in DOC for f in forms)
    return False


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sample_trace) -> Path:
    root = tmp_path_factory.mktemp("runs")
    r = CliRunner()
    for args in (
        ["replay", str(sample_trace), "--hw", "gb200", "-o", str(root / "replay"), "-q"],
        ["sweep", "--hw", "gb200", "--gpus", "16", "-o", str(root / "sweep"), "-q"],
        ["simulate", str(sample_trace), "--hw", "gb200", "-o", str(root / "sim"), "-q"],
        ["kv-curve", str(sample_trace), "--hw", "gb200", "-o", str(root / "kv")],
        ["compare", str(sample_trace), "--hw", "b300", "-o", str(root / "cmp"), "-q"],
        [
            "replay",
            str(sample_trace),
            "--hw",
            "gb200",
            "--replicas",
            "2",
            "--store-gb",
            "100",
            "-o",
            str(root / "fleet"),
            "-q",
        ],  # fmt: skip
        ["simulate", str(sample_trace), "--hw", "b200", "--model", "deepseek-v3", "--gpus", "8",
         "--tp", "8", "--users", "1,2", "--max-think-s", "30", "-o", str(root / "agentic"), "-q"],
    ):  # fmt: skip
        res = r.invoke(cli, args)
        assert res.exit_code == 0, (args, res.output)
    return root


def test_every_output_column_is_defined(runs):
    tables = sorted(runs.rglob("*.parquet"))
    assert {t.stem for t in tables} >= {
        "calls", "stages", "footprint", "sweep", "sim_calls", "sim_timeseries", "kv_curve",
        "compare", "configurations", "frontier",
        "replicas", "replica_load",
    }  # fmt: skip
    missing = [
        f"{t.parent.name}/{t.name}: {c}"
        for t in tables
        for c in pl.read_parquet_schema(t)
        if not _documented(c)
    ]
    assert not missing, "columns not defined in docs/metrics.md: " + ", ".join(missing)


def test_the_check_can_fail():
    assert not _documented("made_up_column_s") and _documented("ttft_s")
