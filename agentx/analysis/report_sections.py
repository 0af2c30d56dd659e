"""The report's sections: which tables and charts the loaded views can answer, in reading order.

Each ``Section`` holds a title, an optional intro, a table and full-width charts (built by
``agentx.analysis.charts``); ``report`` renders them in this order.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl

from agentx.analysis import charts as C
from agentx.analysis.queries import get_query
from agentx.analysis.report_sql import (
    AGENTIC_TABLE_SQL,
    HEADLINE_SQL,
    KV_LINKS_SQL,
    KV_TIERS_SQL,
    VERDICT_SQL,
    _drop_empty,
    _with_offload,
)
from agentx.analysis.views import Database


@dataclass(frozen=True)
class Section:
    title: str
    table: pl.DataFrame | None = None
    chart: alt.TopLevelMixin | None = None
    intro: str = ""
    more_charts: tuple[alt.TopLevelMixin, ...] = ()  # drawn below ``chart``, each full width

    @property
    def charts(self) -> list[alt.TopLevelMixin]:
        return ([self.chart] if self.chart is not None else []) + list(self.more_charts)


def collect_sections(db: Database) -> list[Section]:
    """The tables and charts the loaded inputs can answer, in reading order."""
    v, q = db.views, db.query
    out: list[Section] = []

    def add(title: str, table=None, chart=None, intro: str = "", more=()) -> None:
        out.append(Section(title, table, chart, intro, tuple(more)))

    def named(name: str) -> pl.DataFrame:
        return q(get_query(name).sql)

    if "compare" in v:
        add(
            "Cheapest configuration per system",
            q(
                "SELECT run, hw, gpus, layout, meets_slo, output_tok_s_per_gpu, total_tok_s_per_gpu,"
                " gpu_hours, j_per_output_token, usd_per_m_output_tokens, hbm_peak_gb_per_gpu,"
                " tpot_ms, ttft_p99_ms FROM compare ORDER BY run, hw"
            ),
            intro="Fewest GPUs that serve the trace's load within the service level; "
            "tokens/s and energy are per GPU of that deployment.",
        )
    if "frontier" in v:
        add(
            "Throughput per GPU against speed per user",
            None,
            C.frontier(q("SELECT * FROM frontier")),
            intro="Each point is a decode batch of one layout; a line is a system's Pareto "
            "frontier. Up is cheaper per token, right is faster for each user.",
        )
    if "runs" in v and (head := _drop_empty(q(HEADLINE_SQL))).height:
        add("Headline figures per run", head)
    if "stages" in v:
        add(
            "Where the time and energy go",
            named("energy_per_stage"),
            C.stage_shares(q("SELECT * FROM stages"), by="run"),
        )
    if "replay_calls" in v:
        add("Energy per generated token", named("j_per_output_token"))
    if "footprint" in v:
        add(
            "HBM per GPU: what fills it",
            q(
                "SELECT run, max(bytes_per_gpu) FILTER (WHERE component = 'total') / 1e9 AS peak_gb_per_gpu,"
                " max(bytes_per_gpu) FILTER (WHERE component = 'hbm_capacity') / 1e9 AS capacity_gb_per_gpu"
                " FROM footprint GROUP BY run ORDER BY run"
            ),
            C.hbm_footprint(q("SELECT * FROM footprint")),
        )
    if "kv_curve" in v:
        curve = q(
            "SELECT k.*, r.gpus FROM kv_curve k LEFT JOIN runs r USING (run)"
            if "runs" in v
            else "SELECT * FROM kv_curve"
        )
        if "gpus" in curve.columns and curve["gpus"].null_count():
            curve = curve.drop("gpus")  # a standalone curve file: capacities stay system-wide
        by = "run" if curve["run"].n_unique() > 1 else None
        configured = None
        if "gpus" in curve.columns and "summary" in v:
            configured = q(
                "SELECT s.run, replace(substr(s.key, length('kv_tiers.capacities.') + 1), '_bytes', '')"
                " AS tier, s.value / 1e9 / r.gpus AS capacity_gb FROM summary s JOIN runs r USING (run)"
                " WHERE s.key LIKE 'kv_tiers.capacities.%_bytes'"
                " AND s.run IN (SELECT DISTINCT run FROM kv_curve)"
            )
        add(
            "KV cache: hit ratio against capacity",
            None,
            C.hit_ratio_curve(curve, by=by, configured=configured),
            intro="How much of the reused prompt each tier serves as it grows; the dashed rule "
            "is the capacity the run was configured with.",
        )
    if "summary" in v and (tiers := q(KV_TIERS_SQL)).height:
        add("KV cache tiers", tiers)
        links = q(KV_LINKS_SQL)
        calls = q("SELECT * FROM replay_calls") if "replay_calls" in v else None
        per_call = calls is not None and all(f"kv_{x}_bytes" in calls.columns for x in C.LINKS)
        add("KV traffic between tiers", links, C.kv_link_bytes(calls) if per_call else None)
    if "sessions" in v:
        add("Traces", named("session_growth"))
    # Context growth from a trace when one is given (its compaction flags), else a replay's calls.
    if "calls" in v or "replay_calls" in v:
        key = "trace" if "calls" in v else "run"
        calls = q(f"SELECT * FROM {'calls' if key == 'trace' else 'replay_calls'}")
        first = calls[key].min()
        add(f"Context growth ({first})", None, C.context_growth(calls.filter(pl.col(key) == first)))
    if "sweep" in v:
        add(
            "Latency against throughput per stage",
            named("best_throughput"),
            C.latency_throughput(q("SELECT * FROM sweep")),
        )
    if "sim_timeseries" in v:
        ts = q("SELECT * FROM sim_timeseries")
        add(
            "Serving over time",
            None,
            C.sim_timeseries(ts, by="run" if ts["run"].n_unique() > 1 else None),
        )
    if "agentic_sweep" in v:
        add(*agentic_section(db))
    if "runs" in v and (verdicts := q(VERDICT_SQL)).height:
        add("Agreement with published claims", verdicts)
    if "runs" in v:
        add("Inputs", q("SELECT run, kind, system, model, gpus, run_id FROM runs ORDER BY run"))
    return out


def agentic_section(db: Database) -> tuple[str, pl.DataFrame, alt.TopLevelMixin, str, tuple]:
    """The concurrent-sessions section: KV usage over time, prefix hits and throughput/TTFT
    against N (coloured by offload setting) and a table per run and N."""
    sweep = _with_offload(db, "agentic_sweep")
    charts = (C.hit_ratio_vs_users(sweep), C.throughput_ttft_vs_users(sweep))
    kv = None
    if "agentic_timeseries" in db.views:
        ts = _with_offload(db, "agentic_timeseries")
        kv = C.kv_usage_over_time(ts, by="offload" if ts["offload"].n_unique() > 1 else None)
    table = db.query(AGENTIC_TABLE_SQL)
    table = (
        table.join(sweep.select("run", "offload").unique(), on="run", how="left")
        .select("run", "offload", *[c for c in table.columns if c != "run"])
        .sort("run", "users")
    )
    intro = (
        "N agent sessions share one server (agentx simulate --users), each sending its next "
        "call when its previous answer is back plus think time. KV usage: the share of the HBM "
        "KV pool held by running sequences (kv_usage_ratio) and by cached prefixes "
        "(kv_cached_ratio). Prefix hits: the share of all prompt tokens served from HBM (GPU) "
        "or from the offload tier instead of being recomputed; colours are offload settings."
    )
    title = "Concurrent agent sessions: KV cache and offload"
    return title, table, kv, intro, charts
