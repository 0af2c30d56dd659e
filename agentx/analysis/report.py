"""One self-contained HTML report of run directories that opens with the answer.

The page is a jinja2 template (``report.html``): first the answer in sentences and numbers
(per system: GPUs, J per output token, $ per million output tokens when a comparison is
loaded; else each run's energy, HBM and latency), then full-width charts and small tables
in one unit system (GB, ms, J; ``agentx.units``) written by the one number formatter
(``agentx.fmt``) the CLI uses.

Vega, Vega-Lite and vega-embed are inlined from ``vl_convert.javascript_bundle`` (the same
Vega-Lite version altair writes), so the file opens offline. Each chart can also be exported
as SVG and PNG (vl-convert, no browser). The page records how many charts rendered in
``data-rendered`` on <body>, writes any embedding error into the page, and after rendering
records the page's layout (widths of the page and of each chart, where the answer ends) in
``data-layout``, so a headless browser can check it.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import polars as pl

from agentx.analysis import charts as C
from agentx.analysis.queries import get_query
from agentx.analysis.views import Database, open_db
from agentx.errors import InputError
from agentx.fmt import num
from agentx.io import atomic_path, write_text_atomic
from agentx.progress import progress
from agentx.units import MS

VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
CHART_WIDTH_PX = 1000  # plot area; with axes and legend a chart spans the 1,280 px column
CHART_HEIGHT_PX = 340

# The summary.json figures a reader looks at first (column → the keys replay and simulate runs
# use for it and the factor to this report's units: GB, ms, J).
HEADLINE_KEYS = {
    "j_per_output_token": (("j_per_output_token", "energy_per_output_token_j"), 1.0),
    "energy_j": (("total_energy_j", "energy_j"), 1.0),
    "hbm_peak_gb_per_gpu": (("hbm_peak_bytes_per_gpu",), 1e-9),
    "ttft_p50_ms": (("latency_s.ttft_s.p50", "ttft_s_p50"), 1e3),
    "ttft_p99_ms": (("latency_s.ttft_s.p99", "ttft_s_p99"), 1e3),
    "decode_latency_p50_ms": (("latency_s.decode_latency_s.p50",), 1e3),
    "tpot_p50_ms": (("tpot_s_p50",), 1e3),
}
_ALL_KEYS = [k for keys, _ in HEADLINE_KEYS.values() for k in keys]
HEADLINE_SQL = (
    "SELECT s.run, r.system, r.gpus, "
    + ", ".join(
        f"max(value) FILTER (WHERE key IN ({', '.join(repr(k) for k in keys)})) * {f} AS {alias}"
        for alias, (keys, f) in HEADLINE_KEYS.items()
    )
    + f" FROM summary s JOIN runs r USING (run) WHERE key IN ({', '.join(repr(k) for k in _ALL_KEYS)})"
    " GROUP BY ALL ORDER BY s.run"
)
# Replays with the tier model: per tier its capacity per GPU and the share of reused prompt
# tokens it served; per link the GB moved and the time the link was busy.
KV_TIERS_SQL = """
WITH k AS (SELECT run, key, value FROM summary WHERE key LIKE 'kv_tiers.%'),
reused AS (SELECT run, value AS tokens FROM k WHERE key = 'kv_tiers.reused_tokens'),
tiers AS (SELECT unnest(['hbm', 'dram', 'ssd']) AS tier, unnest([1, 2, 3]) AS o)
SELECT r.run, t.tier,
       max(k.value) FILTER (WHERE k.key = 'kv_tiers.capacities.' || t.tier || '_bytes')
         / 1e9 / r.gpus AS capacity_gb_per_gpu,
       100 * max(k.value) FILTER (WHERE k.key = 'kv_tiers.hits.' || t.tier || '.tokens')
         / nullif(max(u.tokens), 0) AS hit_pct_of_reused_tokens
FROM tiers t CROSS JOIN runs r JOIN k ON k.run = r.run LEFT JOIN reused u ON u.run = r.run
GROUP BY r.run, t.tier, t.o, r.gpus ORDER BY r.run, t.o
"""
KV_LINKS_SQL = """
SELECT run, substr(key, length('kv_tiers.bytes.') + 1) AS link,
       max(value) FILTER (WHERE key LIKE 'kv_tiers.bytes.%') / 1e9 AS gb_moved,
       (SELECT 1e3 * t.value FROM summary t WHERE t.run = s.run
         AND t.key = 'kv_tiers.link_time_s.' || substr(s.key, length('kv_tiers.bytes.') + 1))
         AS link_busy_ms
FROM summary s WHERE key LIKE 'kv_tiers.bytes.%' GROUP BY run, key ORDER BY run, link
"""
# Runs that check published claims (sweeps) record each verdict under summary key "verdict.*".
VERDICT_SQL = (
    "SELECT run, substr(key, 9) AS claim, CASE WHEN value = 1 THEN 'agrees' ELSE 'does not agree'"
    " END AS model_says FROM summary WHERE key LIKE 'verdict.%' ORDER BY run, key"
)
# Agentic simulations (simulate --users): per run and N the figures the public agentic
# benchmarks report, hit ratios as percent of the prompt tokens. The offload tier is the run's
# configuration (run.json), so runs with and without offload compare side by side.
AGENTIC_OFFLOAD_SQL = (
    "SELECT run, coalesce(json_extract_string(config, '$.offload'), 'none') AS offload FROM runs"
)
AGENTIC_TABLE_SQL = f"""
SELECT run, users,
       100 * gpu_prefix_hit_ratio AS gpu_prefix_hit_pct,
       100 * offload_hit_ratio AS offload_hit_pct,
       ttft_p50_s / {MS} AS ttft_p50_ms, tpot_p50_s / {MS} AS tpot_p50_ms, output_tok_s
FROM agentic_sweep ORDER BY run, users
"""


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


@functools.lru_cache(maxsize=1)
def _bundle() -> str:
    import vl_convert as vlc

    return vlc.javascript_bundle(vl_version=VL_VERSION)


def _drop_empty(df: pl.DataFrame) -> pl.DataFrame:
    """Columns with no value at all (a replay has no TPOT percentile) are left out."""
    return df.select([c for c in df.columns if df[c].null_count() < df.height])


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


def _with_offload(db: Database, table: str) -> pl.DataFrame:
    """``table`` of the agentic runs with each run's tier setting (``offload_setting``) and the
    label charts colour by (``offload``: the setting, with the run's name when two runs share
    one, so every run keeps its own line)."""
    df = db.query(f"SELECT * FROM {table}")
    if "runs" in db.views:
        tiers = db.query(AGENTIC_OFFLOAD_SQL)
        df = df.join(tiers, on="run", how="left")
    else:  # standalone table files carry no configuration
        df = df.with_columns(pl.lit(None, pl.String).alias("offload"))
    df = df.with_columns(pl.col("offload").alias("offload_setting"))
    per_run = df.select("run", "offload").unique()
    if per_run["offload"].null_count() or per_run["offload"].n_unique() < per_run.height:
        df = df.with_columns(
            pl.concat_str("run", pl.lit(" ("), pl.col("offload").fill_null("?"), pl.lit(")")).alias(
                "offload"
            )
        )
    return df


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


def table_html(df: pl.DataFrame, max_rows: int = 200) -> str:
    """A table whose cells go through the one number formatter (``agentx.fmt.num``)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    numeric = [df.schema[c].is_numeric() for c in df.columns]
    rows = []
    for rec in df.head(max_rows).iter_rows():
        cells = "".join(
            f'<td class="{"n" if n else "s"}">{html.escape(num(x))}</td>'
            for x, n in zip(rec, numeric, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    more = (
        f"<p class=note>{df.height - max_rows} more rows: use agentx sql</p>"
        if df.height > max_rows
        else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def full_width(spec: dict, width: int = CHART_WIDTH_PX) -> dict:
    """``spec`` sized to span the page: faceted charts split the width among their columns."""
    spec = dict(spec)
    enc = spec.get("encoding", {})
    if "column" in enc or "facet" in spec:
        values = {json.dumps(r.get(enc.get("column", {}).get("field")), sort_keys=True)
                  for r in _rows(spec)}  # fmt: skip
        cols = max(1, len(values))
        spec["width"] = max(160, (width - 60 * cols) // cols)
        spec["height"] = min(spec.get("height", CHART_HEIGHT_PX), CHART_HEIGHT_PX)
    elif "row" in enc:
        spec["width"] = width - 200
    else:
        spec["width"] = width
        spec.setdefault("height", CHART_HEIGHT_PX)
    if "layer" in spec or "hconcat" in spec or "vconcat" in spec:
        spec.setdefault("height", CHART_HEIGHT_PX)
    return spec


def _rows(spec: dict) -> list[dict]:
    data = spec.get("data", {})
    return spec.get("datasets", {}).get(data.get("name"), []) if isinstance(data, dict) else []


def _script_json(obj: object) -> str:
    # "</" inside a <script> would end it early; JSON allows the escaped form.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")


@functools.lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agentx.analysis", "."),
        autoescape=jinja2.select_autoescape(["html"]),
        keep_trailing_newline=True,
    )
    return env.get_template("report.html")


def build_report(
    paths: Sequence[os.PathLike | str], *, title: str = "agentx report"
) -> tuple[str, list[tuple[str, dict]]]:
    """The report's HTML and its charts as (slug, Vega-Lite spec) pairs.

    ``paths`` are run directories (or folders of them) and Parquet files: traces, or standalone
    tables such as ``agentx kv-curve -o curve.parquet``.
    """
    from markupsafe import Markup

    from agentx import __version__

    run_dirs = [p for p in paths if Path(p).is_dir()]
    files = [p for p in paths if not Path(p).is_dir()]
    with open_db(files, run_dirs) as db:
        if not db.views:
            raise InputError(
                ", ".join(map(str, paths)), "no run directories found (no run.json below)"
            )
        lines, cards = answer(db)
        sections = collect_sections(db)
        names = ["runs"] if "runs" in db.views else []
        run_names = db.query("SELECT run FROM runs ORDER BY run")["run"].to_list() if names else []
        run_names += [Path(f).name for f in files]
    specs, charts, rendered = {}, [], []
    for i, s in enumerate(sections):
        item = {"title": s.title, "slug": _slug(s.title), "intro": s.intro, "chart_ids": []}
        for j, chart in enumerate(s.charts):
            suffix = f"-{j + 1}" if j else ""  # a section's first chart keeps the plain name
            cid = f"chart{i:02d}{suffix}"
            spec = full_width(chart.to_dict())
            specs[cid] = spec
            charts.append((f"{i:02d}-{_slug(s.title)}{suffix}", spec))
            item["chart_ids"].append(cid)
        item["table"] = Markup(table_html(s.table)) if s.table is not None else None
        rendered.append(item)
    page = _template().render(
        title=title,
        bundle=Markup(_bundle()),
        n_charts=len(specs),
        version=__version__,
        runs=", ".join(run_names),
        answer=lines,
        cards=cards,
        sections=rendered,
        specs=Markup(_script_json(specs)),
    )
    return page, charts


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_report(
    paths: Sequence[os.PathLike | str],
    out: os.PathLike | str,
    *,
    png_dir: os.PathLike | str | None = None,
    progress_bar: bool | None = None,
) -> list[Path]:
    """Write the HTML report (and SVG + PNG of each chart under ``png_dir``); return the files
    written. Exporting draws a progress bar when stderr is a terminal (``progress_bar`` forces it)."""
    page, charts = build_report(paths)
    write_text_atomic(out, page)
    written = [Path(out)]
    if png_dir is not None:
        import vl_convert as vlc

        folder = Path(png_dir)
        for slug, spec in progress(charts, label="export charts", enabled=progress_bar):
            svg = folder / f"{slug}.svg"
            write_text_atomic(svg, vlc.vegalite_to_svg(spec, vl_version=VL_VERSION))
            png = folder / f"{slug}.png"
            with atomic_path(png, suffix=".png.tmp") as tmp:
                tmp.write_bytes(vlc.vegalite_to_png(spec, vl_version=VL_VERSION, scale=2))
            written += [svg, png]
    return written
