"""Shared CLI pieces: output format options, tables, JSON, progress."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import polars as pl

from agentx.fmt import frame as format_table  # the one formatter (agentx.fmt); sql uses it too

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
    """``--json`` output: strict JSON (NaN and ±inf are null), sorted keys (agentx.io)."""
    from agentx.io import dumps_json

    click.echo(dumps_json(obj))


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


def _known_engine(ctx, param, value):
    """An unknown engine fails before any input is read (one line, did you mean)."""
    if value is not None:
        from agentx.errors import UnknownNameError
        from agentx.replay.config import ENGINES

        if value not in ENGINES:
            raise UnknownNameError("serving engine", value, ENGINES)
    return value


serving_engine_option = click.option(
    "--serving-engine",
    default=None,
    metavar="ENGINE",
    callback=_known_engine,
    help="trt, sglang, vllm or atom: price the fills' routed experts with that engine's measured "
    "MoE kernel where one is tabled for the layout (default: roofline).",
)


def serving_engine_config(engine: str | None) -> dict:
    """run.json's entry for ``--serving-engine``: present only when one was given, so runs
    without it stay as they were."""
    return {} if engine is None else {"serving_engine": engine}


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
# replay also reads a partitioned dataset folder (agentx partition)
trace_or_dataset_argument = click.argument("trace", type=click.Path(path_type=Path))
hw_option = click.option(
    "--hw", required=True, help="System name (agentx hw list), e.g. gb200, h200, b200, b300."
)

# The default GPU count, said once (agentx.replay.config.default_gpus computes it).
DEFAULT_GPUS_HELP = "32 where the scale-up domain spans nodes (NVL72), else one node"


def gpus_option(what: str = "GPUs serving one model instance"):
    """``--gpus N`` with the one default every single-system command shares."""
    return click.option("--gpus", type=int, help=f"{what} (default: {DEFAULT_GPUS_HELP}).")


def resolve_gpus(catalog, hw: str, gpus: int | None) -> int:
    """``gpus``, or the shared default for system ``hw``."""
    from agentx.replay.config import default_gpus

    return default_gpus(catalog.system(hw)) if gpus is None else gpus


# Trace transforms shared by replay, simulate and compare (agentx.traces.transform).
load_scale_option = click.option(
    "--load-scale",
    type=float,
    default=1.0,
    show_default=True,
    metavar="K",
    help="Multiply the offered load by K: every session replicated with fresh ids (not time "
    "compressed: agents keep their own think and tool times; docs/planner.md).",
)
over_context_option = click.option(
    "--over-context",
    type=click.Choice(["warn", "compact", "drop", "error"]),
    default="warn",
    show_default=True,
    help="Calls whose input + output tokens pass the model's context: compact at the limit as "
    "agents do (SEED-6), drop them, stop with an error, or price them as they are and warn.",
)


def apply_over_context(trace, limit_tokens: int, mode: str, *, quiet: bool = False):
    """``trace`` with calls over the model's context handled by ``mode``; says what it did."""
    from agentx.traces.transform import fit_context

    out, rec = fit_context(trace, limit_tokens, mode)
    say_over_context(rec, limit_tokens, mode, quiet=quiet)
    return out, rec


def say_over_context(rec: dict, limit_tokens: int, mode: str, *, quiet: bool = False) -> None:
    """The line ``apply_over_context`` prints for ``rec`` (``calls_over``, ``compactions``)."""
    # the warning is not progress: it prints even with --quiet
    if rec["calls_over"] and (mode == "warn" or not quiet):
        n, lim = f"{rec['calls_over']:,}", f"{limit_tokens:,}"
        msg = {
            "warn": f"warning: {n} calls need more than the model's {lim}-token context and are "
            "priced as they are (--over-context compact|drop|error)",
            "compact": f"note: {n} calls were over the {lim}-token context; "
            f"{rec['compactions']:,} compactions added (SEED-6)",
            "drop": f"note: dropped {n} calls over the {lim}-token context",
        }[mode]
        click.echo(msg, err=True)


def parse_names(value: str | None) -> list[str] | None:
    """``"a, b,c"`` → ``["a", "b", "c"]`` (None stays None)."""
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]
