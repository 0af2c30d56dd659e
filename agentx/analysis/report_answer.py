"""The answer the HTML report opens with: sentences and headline cards of the loaded runs.

Per system of a comparison its GPUs, J and $ per output token; else each run's energy, HBM and
latency; for agentic simulations the N range, where GPU prefix hits fall and what offload
changes. ``agentx report --json`` prints the same sentences (``report_answer``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from agentx.analysis.report_sql import HEADLINE_SQL, _drop_empty, _with_offload
from agentx.analysis.views import Database, open_db
from agentx.fmt import num
from agentx.units import MS


def answer(db: Database) -> tuple[list[str], list[dict]]:
    """The opening sentences and the headline cards (label → figures) of the loaded runs."""
    from agentx.planner.answer import headline

    v, q = db.views, db.query
    lines: list[str] = []
    cards: list[dict] = []
    if "compare" in v:
        cmp = q("SELECT * FROM compare ORDER BY run")
        for run in cmp["run"].unique(maintain_order=True):
            rows = cmp.filter(pl.col("run") == run).to_dicts()
            slo = dict(
                q(
                    f"SELECT substr(key, 5), value FROM summary WHERE run = '{run}' AND key LIKE 'slo.%'"
                ).iter_rows()
            )
            lines += headline(rows, slo).splitlines()
            for r in rows:
                figures = [
                    (num(r["gpus"]), "GPUs"),
                    (num(r["j_per_output_token"]), "J per output token"),
                    (num(r["output_tok_s_per_gpu"]), "output tokens/s per GPU"),
                ]
                if r.get("usd_per_m_output_tokens") is not None:
                    figures.insert(
                        2, ("$" + num(r["usd_per_m_output_tokens"]), "per M output tokens")
                    )
                cards.append({"label": r["hw"].upper(), "figures": figures, "ok": r["meets_slo"]})
    elif "runs" in v and "summary" in v:
        head = _drop_empty(q(HEADLINE_SQL))
        for r in head.to_dicts():
            parts = [f"{num(r['j_per_output_token'])} J per output token"]
            if r.get("hbm_peak_gb_per_gpu") is not None:
                parts.append(f"peak HBM {num(r['hbm_peak_gb_per_gpu'])} GB per GPU")
            if r.get("ttft_p99_ms") is not None:
                parts.append(f"TTFT p99 {num(r['ttft_p99_ms'])} ms")
            gpus = f"{num(r['gpus'])} × " if r.get("gpus") else ""
            lines.append(f"{r['run']} ({gpus}{r['system']}): {', '.join(parts)}.")
            cards.append(
                {
                    "label": r["run"],
                    "figures": [(num(r["j_per_output_token"]), "J per output token")]
                    + (
                        [(num(r["hbm_peak_gb_per_gpu"]), "GB HBM peak per GPU")]
                        if r.get("hbm_peak_gb_per_gpu") is not None
                        else []
                    ),
                    "ok": True,
                }
            )
        if lines:
            lines.append(
                "These runs use their own GPU counts and batches; for the GPUs a load needs at "
                "one service level and its cost per token, run agentx compare."
            )
    if "agentic_sweep" in v:
        lines += agentic_answer(db)
    return lines, cards


# A prefix-hit ratio below this share of its value at the smallest N marks where the HBM
# cache stops holding the sessions' prefixes (the knee of the sweep).
KNEE_SHARE = 0.9


def agentic_answer(db: Database) -> list[str]:
    """Per agentic run: the N range, GPU prefix hits at both ends and where they fall (if they
    do), TTFT and output tokens/s; then what offload changes at the largest N both runs share."""
    sweep = _with_offload(db, "agentic_sweep").sort("run", "users")
    info = (
        db.query("SELECT run, system, model, gpus FROM runs")
        if "runs" in db.views
        else sweep.select("run").unique().with_columns(system=None, model=None, gpus=None)
    )
    lines = []
    for run, g in sweep.group_by("run", maintain_order=True):
        r = info.filter(pl.col("run") == run[0]).row(0, named=True)
        lo, hi = g.row(0, named=True), g.row(-1, named=True)
        what = ", ".join(
            x
            for x in (
                f"{num(r['gpus'])} × {r['system']}" if r["gpus"] else r["system"],
                r["model"],
                f"offload {lo['offload']}" if lo["offload"] else None,
            )
            if x
        )
        n = f"N={num(lo['users'])}" + (f"…{num(hi['users'])}" if g.height > 1 else "")
        hits = f"GPU prefix hits {_scaled(lo['gpu_prefix_hit_ratio'], 100)} %"
        if g.height > 1:
            hits += f" at N={num(lo['users'])}, {_scaled(hi['gpu_prefix_hit_ratio'], 100)} % at N={num(hi['users'])}"
        first = lo["gpu_prefix_hit_ratio"] or 0.0
        fall = g.filter(pl.col("gpu_prefix_hit_ratio") < KNEE_SHARE * first)
        if fall.height:
            hits += f" (below {num(100 * KNEE_SHARE)} % of it from N={num(fall['users'][0])})"
        if hi["offload_hit_ratio"]:
            hits += (
                f"; offload hits {_scaled(hi['offload_hit_ratio'], 100)} % at N={num(hi['users'])}"
            )
        at_top = (
            [f"TTFT p50 {_scaled(hi['ttft_p50_s'], 1 / MS)} ms"]
            if hi["ttft_p50_s"] is not None
            else []
        ) + [f"{num(hi['output_tok_s'])} output tokens/s"]
        lines.append(
            f"{run[0]} ({what}), {n} sessions: {hits}; {' and '.join(at_top)} at N={num(hi['users'])}."
        )
    lines += _offload_gain(sweep, info)
    return lines


def _offload_gain(sweep: pl.DataFrame, info: pl.DataFrame) -> list[str]:
    """Runs of one system, model and GPU count with and without offload, at their largest
    common N: the share of prompt tokens served from cache and TTFT p50 side by side."""
    s = sweep.join(info, on="run", how="left").with_columns(
        cached=pl.col("gpu_prefix_hit_ratio") + pl.col("offload_hit_ratio").fill_null(0.0)
    )
    off = s.filter(pl.col("offload_setting") == "none")
    on = s.filter(pl.col("offload_setting") != "none")
    both = on.join(off, on=["system", "model", "gpus", "users"], suffix="_off")
    lines = []
    for _, g in both.group_by("run", "run_off", maintain_order=True):
        r = g.sort("users").row(-1, named=True)
        lines.append(
            f"At N={num(r['users'])}, {r['run']} serves {_scaled(r['cached'], 100)} % of prompt "
            f"tokens from cache against {_scaled(r['cached_off'], 100)} % for {r['run_off']} "
            f"(no offload); TTFT p50 {_scaled(r['ttft_p50_s'], 1 / MS)} ms against "
            f"{_scaled(r['ttft_p50_s_off'], 1 / MS)} ms."
        )
    return lines


def _scaled(x: float | None, factor: float) -> str:
    # a sweep point without a completed call has no percentile: an empty figure, not a crash
    return num(None if x is None else x * factor)


def report_answer(paths: Sequence[os.PathLike | str]) -> list[str]:
    """The sentences the report opens with, for ``agentx report --json``."""
    run_dirs = [p for p in paths if Path(p).is_dir()]
    files = [p for p in paths if not Path(p).is_dir()]
    with open_db(files, run_dirs) as db:
        return answer(db)[0]
