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

This module assembles the page (``build_report``) and writes it with its chart exports
(``write_report``); it is the report's public entry point and re-exports its parts: the SQL
(``report_sql``), the opening answer (``report_answer``), the sections (``report_sections``)
and the HTML pieces (``report_html``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agentx.analysis.report_answer import (
    KNEE_SHARE,
    agentic_answer,
    answer,
    report_answer,
)
from agentx.analysis.report_html import (
    CHART_HEIGHT_PX,
    CHART_WIDTH_PX,
    VL_VERSION,
    _bundle,
    _script_json,
    _slug,
    _template,
    full_width,
    table_html,
)
from agentx.analysis.report_sections import Section, agentic_section, collect_sections
from agentx.analysis.report_sql import (
    AGENTIC_OFFLOAD_SQL,
    AGENTIC_TABLE_SQL,
    HEADLINE_KEYS,
    HEADLINE_SQL,
    KV_LINKS_SQL,
    KV_TIERS_SQL,
    VERDICT_SQL,
)
from agentx.analysis.views import open_db
from agentx.errors import InputError
from agentx.io import atomic_path, write_text_atomic
from agentx.progress import progress

# The names other code, notebooks and tests import from this module, the report's entry point.
__all__ = [
    "AGENTIC_OFFLOAD_SQL",
    "AGENTIC_TABLE_SQL",
    "CHART_HEIGHT_PX",
    "CHART_WIDTH_PX",
    "HEADLINE_KEYS",
    "HEADLINE_SQL",
    "KNEE_SHARE",
    "KV_LINKS_SQL",
    "KV_TIERS_SQL",
    "VERDICT_SQL",
    "VL_VERSION",
    "Section",
    "agentic_answer",
    "agentic_section",
    "answer",
    "build_report",
    "collect_sections",
    "full_width",
    "report_answer",
    "table_html",
    "write_report",
]


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
