"""Shared CLI pieces: output format options, tables, JSON, progress."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import polars as pl

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress output.")
catalog_option = click.option(
    "--catalog",
    "catalog_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Extra catalog TOML with [chips.*], [systems.*], [models.*] (repeatable; later wins).",
)


def emit_json(obj: object) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=_default))


def _default(o: object) -> object:
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def format_table(df: pl.DataFrame, *, float_digits: int = 4) -> str:
    """A plain aligned text table (no box drawing, so it pastes cleanly)."""
    cols = df.columns
    rows: list[list[str]] = []
    for rec in df.iter_rows():
        rows.append([_cell(v, float_digits) for v in rec])
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    numeric = [df.schema[c].is_numeric() for c in cols]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, numeric, strict=True)
        ).rstrip()

    out = [line(cols), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _cell(v: object, digits: int) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e6 or abs(v) < 1e-3:
            return f"{v:.{digits - 1}e}"
        return f"{v:,.{digits}g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def print_table(df: pl.DataFrame) -> None:
    click.echo(format_table(df))


def is_interactive() -> bool:
    return sys.stderr.isatty()


def model_option(help: str = "Model name (agentx models list).", default: str | None = "kimi-k2"):
    """``--model NAME`` stored as ``model_name`` (``model`` would shadow the module-level names)."""
    return click.option(
        "--model", "model_name", default=default, show_default=default is not None, help=help
    )


def run_dir_option(tables: str = "", *, required: bool = False):
    """``-o/--output DIR`` for commands that write a run directory (agentx.runs)."""
    what = f" ({tables})" if tables else ""
    return click.option(
        "-o",
        "--output",
        "run_dir",
        required=required,
        type=click.Path(file_okay=False, path_type=Path),
        help=f"Write the run directory here{what}.",
    )


def output_file_option(help: str):
    """``-o/--output FILE`` (required) for commands that write one file atomically."""
    return click.option(
        "-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help=help
    )


def precision_option(what: str):
    """``--weight-precision`` / ``--expert-precision`` / ``--kv-precision``.

    Weights take a stored format (bf16, fp8, the generic fp4, nvfp4 4.5 b, mxfp4 4.25 b,
    int4 W4A16 4.5 b); ``--expert-precision`` sets the routed experts apart (default: the
    weight format); KV is bf16, fp8 or fp4.
    """
    from agentx.catalog.types import PRECISIONS, WEIGHT_FORMATS

    helps = {
        "weight": "Attention/dense weight format: bf16 2 B, fp8 1 B, fp4 0.53 B, nvfp4 4.5 b, "
        "mxfp4 4.25 b, int4 (W4A16, BF16 math) 4.5 b per weight.",
        "expert": "Routed-expert weight format (same choices; default: --weight-precision).",
        "kv": "Bytes per KV element: bf16 2, fp8 1 (MLA: FlashMLA's 656 B per layer), fp4 0.53.",
    }
    choices = PRECISIONS if what == "kv" else WEIGHT_FORMATS
    return click.option(
        f"--{what}-precision",
        type=click.Choice(choices),
        default=None if what == "expert" else "fp8",
        show_default=what != "expert",
        help=helps[what],
    )


def layout_options(f):
    """``--tp --ep --pp --dp-attention/--tp-attention`` and the three precision options, with
    the parameter names ``make_config`` takes (for commands that build a deployment)."""
    for opt in reversed(
        [
            click.option(
                "--tp",
                type=int,
                help="Tensor-parallel ranks of attention (default 8, or 1 with DP attention).",
            ),
            click.option(
                "--ep",
                type=int,
                help="Expert-parallel ranks (default: all GPUs of a pipeline stage).",
            ),
            click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages."),
            click.option(
                "--dp-attention/--tp-attention",
                "dp_attention",
                default=None,
                help="Data-parallel attention (default for MLA models) or tensor-parallel attention.",
            ),
            precision_option("weight"),
            precision_option("expert"),
            precision_option("kv"),
        ]
    ):
        f = opt(f)
    return f


pools_option = click.option(
    "--pools",
    type=click.Choice(["disaggregated", "aggregated"]),
    default="disaggregated",
    show_default=True,
    help="Separate fill and decode pools (KV moves between them) or one pool doing both (SEED-17).",
)


# The trace a command prices or simulates, and the system it runs on (agentx hw list).
trace_argument = click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
hw_option = click.option(
    "--hw", required=True, help="System name (agentx hw list), e.g. gb200, h200, b200, b300."
)
