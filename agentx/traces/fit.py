"""Fit the synthetic generator to a real canonical trace, and say how close the look-alike is.

Log-normal quantities are fitted by matching the real p50 and p90 (the generator's own
parametrisation): the heavy tails of agentic traces (appended tokens p99 is 20× p90 in Weka,
SOURCES.md §2) would drag a moment fit away from the bulk that the cost model mostly sees.
The same ``samples`` function feeds both the fit and the report, so real and synthetic
figures are always measured the same way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from agentx.traces.io import Trace
from agentx.traces.synth_params import PREFIX_BREAK_MAX_KEEP, SynthParams

# Quantities compared by fit_report, in display order (units are in the names).
REPORTED = (
    "calls_per_session",
    "first_input_tokens",
    "appended_tokens",
    "output_tokens",
    "think_time_s",
    "input_tokens",
)
_MAIN = pl.col("agent_id").is_null()
_BREAK = pl.col("reused_prefix_tokens") < PREFIX_BREAK_MAX_KEEP * pl.col("_prev_input")
# A fresh session's first prompt is the shared prefix plus a short request (W603: 323 of 603).
_FRESH = pl.col("input_tokens") < 2 * pl.col("shared_prefix_tokens")


def _frame(t: Trace | pl.DataFrame) -> pl.DataFrame:
    """The columns the fit reads: block hash lists are most of a real trace's bytes."""
    df = t.calls if isinstance(t, Trace) else t
    return df.select(pl.exclude("block_hashes", "block_size_tokens"))


def _with_context(df: pl.DataFrame) -> pl.DataFrame:
    """Per row: position in its agent's own call sequence and that agent's previous prompt."""
    agent = ["session_id", "agent_id"]
    return df.with_columns(
        _k=pl.int_range(pl.len()).over(agent),
        _prev_input=pl.col("input_tokens").shift(1).over(agent),
        _prev_t=pl.col("t_start_s").shift(1).over(agent),
    )


def samples(t: Trace | pl.DataFrame) -> dict[str, np.ndarray]:
    """Every sample the fit and the report use, as float arrays (empty when absent)."""
    df = _with_context(_frame(t))
    main = df.filter(_MAIN)
    later = main.filter((pl.col("_k") > 0) & ~pl.col("is_compaction"))
    comp = main.filter(pl.col("is_compaction"))
    grown = later.filter(~_BREAK).with_columns(
        _growth=pl.col("input_tokens") - pl.col("_prev_input")
    )
    firsts = main.filter(pl.col("_k") == 0)
    per_session = main.group_by("session_id", maintain_order=True).agg(
        len=pl.len(), fresh=_FRESH.first()
    )
    fresh = firsts.filter(_FRESH)
    subs = (
        df.filter(~_MAIN)
        .group_by("session_id", "agent_id")
        .agg(
            n=pl.len(),
            first=pl.col("input_tokens").first(),
            prefix=pl.col("shared_prefix_tokens").first(),
        )
    )
    timed = main.filter((pl.col("_k") > 0) & pl.col("think_time_s").is_not_null())
    as_np = lambda s: s.cast(pl.Float64).to_numpy()  # noqa: E731
    return {
        "calls_per_session": as_np(per_session["len"]),
        "fresh_calls_per_session": as_np(per_session.filter("fresh")["len"]),
        "resumed_calls_per_session": as_np(per_session.filter(~pl.col("fresh"))["len"]),
        "first_input_tokens": as_np(firsts["input_tokens"]),
        "fresh_first_extra_tokens": as_np(fresh["input_tokens"] - fresh["shared_prefix_tokens"]),
        "resumed_first_input_tokens": as_np(firsts.filter(~_FRESH)["input_tokens"]),
        "appended_tokens": as_np(later["new_tokens"]),
        # The generator's appended draw is context growth; fit it where the prefix held.
        "user_appended_tokens": as_np(grown.filter(pl.col("trigger") == "user")["_growth"]),
        "tool_appended_tokens": as_np(grown.filter(pl.col("trigger") != "user")["_growth"]),
        "output_tokens": as_np(df["output_tokens"]),
        "think_time_s": as_np(timed["think_time_s"]),
        "user_think_time_s": as_np(timed.filter(pl.col("trigger") == "user")["think_time_s"]),
        "tool_think_time_s": as_np(timed.filter(pl.col("trigger") != "user")["think_time_s"]),
        "api_time_s": as_np(timed["t_start_s"] - timed["_prev_t"] - timed["think_time_s"]),
        "input_tokens": as_np(df["input_tokens"]),
        "summary_tokens": as_np(comp["input_tokens"] - comp["shared_prefix_tokens"]),
        "pre_compaction_tokens": as_np(comp["_prev_input"]),
        "subagent_calls": as_np(subs["n"]),
        "subagent_first_input_tokens": as_np(subs["first"]),
        "subagent_shared_prefix_tokens": as_np(subs["prefix"]),
    }


def _pair(x: np.ndarray, default: tuple[float, float], lo: float = 1e-3) -> tuple[float, float]:
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return default
    p50, p90 = (float(max(v, lo)) for v in np.percentile(x, [50, 90]))
    return p50, max(p90, p50)


def fit_params(real: Trace | pl.DataFrame, base: SynthParams | None = None) -> SynthParams:
    """``base`` (default ``SynthParams()``) with every quantity the real trace shows replaced."""
    base = base or SynthParams()
    df = _frame(real)
    s = samples(df)
    fit: dict[str, object] = {}
    for name in (
        "fresh_calls_per_session",
        "resumed_calls_per_session",
        "fresh_first_extra_tokens",
        "resumed_first_input_tokens",
        "tool_appended_tokens",
        "user_appended_tokens",
        "output_tokens",
        "tool_think_time_s",
        "user_think_time_s",
        "api_time_s",
        "summary_tokens",
        "subagent_calls",
        "subagent_first_input_tokens",
    ):
        fit[f"{name}_p50"], fit[f"{name}_p90"] = _pair(
            s[name], (getattr(base, f"{name}_p50"), getattr(base, f"{name}_p90"))
        )
    main = df.filter(_MAIN)
    if main.height:
        fit["shared_prefix_tokens"] = int(main["shared_prefix_tokens"].median())
    if s["subagent_shared_prefix_tokens"].size:
        fit["subagent_shared_prefix_tokens"] = int(np.median(s["subagent_shared_prefix_tokens"]))
    n_sessions = df["session_id"].n_unique()
    fit["resumed_session_share"] = s["resumed_first_input_tokens"].size / max(n_sessions, 1)
    sub_sessions = df.filter(~_MAIN)["session_id"].n_unique()
    fit["subagent_session_share"] = sub_sessions / max(n_sessions, 1)
    if sub_sessions:
        fit["subagents_per_session_mean"] = s["subagent_calls"].size / sub_sessions
    later = _with_context(main).filter((pl.col("_k") > 0) & ~pl.col("is_compaction"))
    if later.height:
        fit["user_turn_share"] = float((later["trigger"] == "user").mean())
        fit["prefix_break_share"] = float(later.select(_BREAK.mean()).item())
    fit["context_limit_tokens"] = max(base.context_limit_tokens, int(df["input_tokens"].max() or 0))
    fit.update(_fit_compaction(main, s["pre_compaction_tokens"], fit["context_limit_tokens"]))
    starts = main.group_by("session_id").agg(pl.col("t_start_s").min())["t_start_s"]
    if starts.len() > 1 and starts.max() > starts.min():
        fit["session_rate_per_s"] = (starts.len() - 1) / float(starts.max() - starts.min())
    models = df["model"].drop_nulls()
    fit["model"] = models.mode().sort()[0] if models.len() else base.model
    floor = (
        2
        * max(
            int(fit.get("shared_prefix_tokens", base.shared_prefix_tokens)),
            int(fit.get("subagent_shared_prefix_tokens", base.subagent_shared_prefix_tokens)),
        )
        + 2
    )
    fit["early_limit_tokens"] = max(
        int(fit.get("early_limit_tokens", base.early_limit_tokens)), floor
    )
    return dataclasses.replace(base, **fit)


def _fit_compaction(main: pl.DataFrame, pre: np.ndarray, limit: int) -> dict[str, object]:
    """Compactions well below the hard limit come from an early limit (Claude Code compacts near
    80 % of a 200k window); its share is taken among fresh sessions (W603: 97 of the 108
    compacting sessions are fresh ones)."""
    pre = pre[np.isfinite(pre)]
    if pre.size == 0:
        return {"early_limit_share": 0.0}
    early = int(min(np.percentile(pre[pre <= 2 * np.median(pre)], 90), limit))  # main cluster's top
    per = (
        main.group_by("session_id")
        .agg(
            top=pl.col("input_tokens").max(),
            comp=pl.col("is_compaction").any(),
            fresh=_FRESH.first(),
        )
        .filter(pl.col("fresh"))
    )
    # Fresh sessions that compacted near the early limit vs those whose context went well past
    # it; sessions that ended short of it say nothing about their window.
    capped = per.filter(pl.col("comp") & (pl.col("top") <= 1.25 * early)).height
    beyond = per.filter(pl.col("top") > 1.25 * early).height
    return {"early_limit_tokens": early, "early_limit_share": capped / max(capped + beyond, 1)}


def ks_distance(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sample Kolmogorov–Smirnov statistic: the largest gap between the two ECDFs."""
    if a.size == 0 or b.size == 0:
        return None
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    return float(
        np.max(
            np.abs(
                np.searchsorted(a, x, "right") / a.size - np.searchsorted(b, x, "right") / b.size
            )
        )
    )


def fit_report(real: Trace | pl.DataFrame, synth: Trace | pl.DataFrame) -> pl.DataFrame:
    """p50 / p90 / p99 of real vs synthetic for each quantity, with the KS distance."""
    r, s = samples(real), samples(synth)
    rows = []
    for q in REPORTED:
        row: dict[str, object] = {"quantity": q, "real_n": r[q].size, "synth_n": s[q].size}
        for pct in (50, 90, 99):
            row[f"real_p{pct}"] = float(np.percentile(r[q], pct)) if r[q].size else None
            row[f"synth_p{pct}"] = float(np.percentile(s[q], pct)) if s[q].size else None
        row["ks_distance"] = ks_distance(r[q], s[q])
        rows.append(row)
    return pl.DataFrame(
        rows,
        schema={
            "quantity": pl.String,
            "real_n": pl.Int64,
            "synth_n": pl.Int64,
            **{f"{w}_p{p}": pl.Float64 for p in (50, 90, 99) for w in ("real", "synth")},
            "ks_distance": pl.Float64,
        },
    )


def share_report(real: Trace | pl.DataFrame, synth: Trace | pl.DataFrame) -> pl.DataFrame:
    """Whole-trace shares of real vs synthetic: sub-agents, user turns, compaction, reuse."""

    def shares(df: pl.DataFrame) -> dict[str, float]:
        later = _with_context(df).filter(_MAIN & (pl.col("_k") > 0) & ~pl.col("is_compaction"))
        return {
            "subagent_session_share": df.filter(~_MAIN)["session_id"].n_unique()
            / max(df["session_id"].n_unique(), 1),
            "user_turn_share": float((later["trigger"] == "user").mean() or 0.0)
            if later.height
            else 0.0,
            "prefix_break_share": float(later.select(_BREAK.mean()).item() or 0.0)
            if later.height
            else 0.0,
            "compactions_per_1k_calls": 1000 * float(df["is_compaction"].sum()) / max(df.height, 1),
            "token_weighted_reuse": float(df["reused_prefix_tokens"].sum())
            / max(float(df["input_tokens"].sum()), 1.0),
        }

    a, b = shares(_frame(real)), shares(_frame(synth))
    return pl.DataFrame({"quantity": list(a), "real": list(a.values()), "synth": [b[k] for k in a]})
