"""One self-contained HTML report of run directories: key tables and charts, no network needed.

Vega, Vega-Lite and vega-embed are inlined from ``vl_convert.javascript_bundle`` (the same
Vega-Lite version altair writes), so the file opens offline. Each chart can also be exported
as SVG and PNG (vl-convert, no browser) for slides. The page records how many charts rendered
in ``data-rendered`` on <body> and writes any embedding error into the page, so a headless
browser can check it.
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
from agentx.io import atomic_path, write_text_atomic
from agentx.progress import progress

VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


# The summary.json figures a reader looks at first (column → the keys replay and simulate runs
# use for it), one row per run that has any of them.
HEADLINE_KEYS = {
    "j_per_output_token": ("j_per_output_token", "energy_per_output_token_j"),
    "total_energy_j": ("total_energy_j", "energy_j"),
    "hbm_peak_bytes_per_gpu": ("hbm_peak_bytes_per_gpu",),
    "ttft_p50_s": ("latency_s.ttft_s.p50", "ttft_s_p50"),
    "ttft_p99_s": ("latency_s.ttft_s.p99", "ttft_s_p99"),
    "decode_latency_p50_s": ("latency_s.decode_latency_s.p50",),
    "tpot_p50_s": ("tpot_s_p50",),
}
_ALL_KEYS = [k for keys in HEADLINE_KEYS.values() for k in keys]
HEADLINE_SQL = (
    "SELECT run, "
    + ", ".join(
        f"max(value) FILTER (WHERE key IN ({', '.join(repr(k) for k in keys)})) AS {alias}"
        for alias, keys in HEADLINE_KEYS.items()
    )
    + f" FROM summary WHERE key IN ({', '.join(repr(k) for k in _ALL_KEYS)}) GROUP BY run ORDER BY run"
)
# Replays run with the tier model summarise it under "kv_tiers.*" (capacities, hits, bytes).
# One row per figure and one column per run, so runs compare side by side.
KV_TIERS_SQL = (
    "PIVOT (SELECT run, substr(key, 10) AS figure, value FROM summary WHERE key LIKE 'kv_tiers.%')"
    " ON run USING first(value) ORDER BY figure"
)
# Runs that check SEED claims (sweeps) record each verdict under summary key "verdict.*".
VERDICT_SQL = "SELECT run, substr(key, 9) AS check, value FROM summary WHERE key LIKE 'verdict.%' ORDER BY run, key"


@dataclass(frozen=True)
class Section:
    title: str
    table: pl.DataFrame | None = None
    chart: alt.TopLevelMixin | None = None


@functools.lru_cache(maxsize=1)
def _bundle() -> str:
    import vl_convert as vlc

    return vlc.javascript_bundle(vl_version=VL_VERSION)


def collect_sections(db: Database) -> list[Section]:
    """The tables and charts the loaded inputs can answer, in reading order."""
    v, q = db.views, db.query
    out: list[Section] = []

    def add(title: str, table: pl.DataFrame | None = None, chart=None) -> None:
        out.append(Section(title, table, chart))

    def named(name: str) -> pl.DataFrame:
        return q(get_query(name).sql)

    if "runs" in v:
        add("Runs", q("SELECT run, kind, system, model, gpus, run_id FROM runs ORDER BY run"))
        for title, sql in (
            ("Headline figures per run", HEADLINE_SQL),
            ("SEED checks (1 = agrees)", VERDICT_SQL),
            ("KV tiers (replay summary)", KV_TIERS_SQL),
        ):
            if (table := q(sql)).height:
                add(title, table)
    if "sessions" in v:
        add("Traces", named("session_growth"))
    if "stages" in v:
        add(
            "Energy and time per stage",
            named("energy_per_stage"),
            C.stage_shares(q("SELECT * FROM stages"), by="run"),
        )
    if "replay_calls" in v:
        calls = q("SELECT * FROM replay_calls")
        add("Energy per generated token", named("j_per_output_token"))
        # Totals per link come from summary.json; the time chart needs the per-call columns.
        links = named("bytes_per_tier_link")
        per_call = all(f"kv_{link}_bytes" in calls.columns for link in C.LINKS)
        if links.height or per_call:
            add("KV bytes per tier link", links, C.kv_link_bytes(calls) if per_call else None)
            add("KV hits per tier", named("kv_hit_tokens"))
    # Context growth from a trace when one is given (its compaction flags), else a replay's calls.
    if "calls" in v or "replay_calls" in v:
        key = "trace" if "calls" in v else "run"
        calls = q(f"SELECT * FROM {'calls' if key == 'trace' else 'replay_calls'}")
        first = calls[key].min()
        add(f"Context growth ({first})", None, C.context_growth(calls.filter(pl.col(key) == first)))
    if "footprint" in v:
        add(
            "HBM footprint per GPU",
            named("peak_hbm_per_gpu"),
            C.hbm_footprint(q("SELECT * FROM footprint")),
        )
    if "kv_curve" in v:
        curve = q("SELECT * FROM kv_curve")
        by = "run" if curve["run"].n_unique() > 1 else None
        add("KV hit ratio against capacity", None, C.hit_ratio_curve(curve, by=by))
    if "sweep" in v:
        add(
            "Latency–throughput",
            named("best_throughput"),
            C.latency_throughput(q("SELECT * FROM sweep")),
        )
    if "sim_timeseries" in v:
        ts = q("SELECT * FROM sim_timeseries")
        add(
            "Serving dynamics",
            None,
            C.sim_timeseries(ts, by="run" if ts["run"].n_unique() > 1 else None),
        )
    return out


def table_html(df: pl.DataFrame, max_rows: int = 200) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    num = [df.schema[c].is_numeric() for c in df.columns]
    rows = []
    for rec in df.head(max_rows).iter_rows():
        cells = "".join(
            f'<td class="{"n" if n else "s"}">{html.escape(num(x))}</td>'
            for x, n in zip(rec, num, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    more = (
        f"<p class=note>{df.height - max_rows} more rows: use agentx sql</p>"
        if df.height > max_rows
        else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def _script_json(obj: object) -> str:
    # "</" inside a <script> would end it early; JSON allows the escaped form.
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}}
table{{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}}
th,td{{border-bottom:1px solid #ddd;padding:3px 8px}} th{{text-align:left;background:#f4f4f4}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}} .note{{color:#666;font-size:12px}}
.chart{{margin:.5em 0 2em}} .error{{color:#b00;white-space:pre-wrap}}
</style>
<script>{bundle}</script>
</head><body data-rendered="0" data-charts="{n_charts}">
<h1>{title}</h1>
<p class=note>agentx {version}; inputs: {runs}. Figures are modelled, not measured.</p>
{body}
<script>
const specs = {specs};
Promise.all(Object.entries(specs).map(([id, spec]) =>
  vegaEmbed("#" + id, spec, {{renderer: "svg", actions: false}}))).then(() => {{
  document.body.dataset.rendered = String(Object.keys(specs).length);
}}).catch((err) => {{
  const p = document.createElement("pre"); p.className = "error"; p.textContent = String(err);
  document.body.appendChild(p); document.body.dataset.failed = "1";
}});
</script>
</body></html>
"""


def build_report(
    paths: Sequence[os.PathLike | str], *, title: str = "agentx report"
) -> tuple[str, list[tuple[str, dict]]]:
    """The report's HTML and its charts as (slug, Vega-Lite spec) pairs.

    ``paths`` are run directories (or folders of them) and Parquet files: traces, or standalone
    tables such as ``agentx kv-curve -o curve.parquet``.
    """
    from agentx import __version__

    run_dirs = [p for p in paths if Path(p).is_dir()]
    files = [p for p in paths if not Path(p).is_dir()]
    with open_db(files, run_dirs) as db:
        if not db.views:
            raise InputError(
                ", ".join(map(str, paths)), "no run directories found (no run.json below)"
            )
        sections = collect_sections(db)
        names = ["runs"] if "runs" in db.views else []
        run_names = db.query("SELECT run FROM runs ORDER BY run")["run"].to_list() if names else []
        run_names += [Path(f).name for f in files]
    body, specs, charts = [], {}, []
    for i, s in enumerate(sections):
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.chart is not None:
            cid = f"chart{i:02d}"
            spec = s.chart.to_dict()
            specs[cid] = spec
            charts.append((f"{i:02d}-{_slug(s.title)}", spec))
            body.append(f'<div class="chart" id="{cid}"></div>')
        if s.table is not None:
            body.append(table_html(s.table))
    page = PAGE.format(
        title=html.escape(title),
        bundle=_bundle(),
        n_charts=len(specs),
        version=__version__,
        runs=html.escape(", ".join(run_names)),
        body="\n".join(body),
        specs=_script_json(specs),
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
