"""HTML pieces of the report: the inlined Vega bundle, the jinja2 page template, tables whose
cells go through the one number formatter, chart specs sized to the page, and section slugs.

Vega, Vega-Lite and vega-embed come from ``vl_convert.javascript_bundle`` at the Vega-Lite
version altair writes (``VL_VERSION``), so the page opens offline.
"""

from __future__ import annotations

import functools
import html
import json
import re

import altair as alt
import polars as pl

from agentx.fmt import num

VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
CHART_WIDTH_PX = 1000  # plot area; with axes and legend a chart spans the 1,280 px column
CHART_HEIGHT_PX = 340


@functools.lru_cache(maxsize=1)
def _bundle() -> str:
    import vl_convert as vlc

    return vlc.javascript_bundle(vl_version=VL_VERSION)


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
