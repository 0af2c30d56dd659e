"""``agentx plan``: HBM capacity arithmetic (SEED-14) and per-GPU footprints (SEED-21)."""

from __future__ import annotations

import click
import polars as pl

from agentx.cli._common import (
    catalog_option,
    emit_json,
    gpus_option,
    json_option,
    precision_option,
    print_table,
)
from agentx.errors import UsageError
from agentx.units import GB


@click.command(
    "plan",
    epilog="Example: agentx plan --kv-bytes-per-token 70000 --context-tokens 2e6",
)
@click.option(
    "--kv-bytes-per-token", type=float, help="KV bytes per token one stage holds (SEED-14: 70000)."
)
@click.option(
    "--context-tokens",
    type=float,
    default=0.0,
    show_default=True,
    help="Aggregate active context resident, tokens (per stage; with --hw, in the whole instance).",
)
@click.option("--model", "model_name", help="Model whose weights (and KV per token) to count.")
@click.option("--hw", "hw_name", help="System: print the per-GPU footprint and whether it fits.")
@gpus_option("With --hw: GPUs in the instance")
@click.option(
    "--tp", type=int, help="Tensor parallel ranks per stage (default: min(8, GPUs per stage))."
)
@click.option("--ep", type=int, help="Expert parallel ranks (default: GPUs per stage).")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages.")
@click.option(
    "--gpus-per-stage",
    type=int,
    default=8,
    show_default=True,
    help="Without --hw: GPUs in one stage.",
)
@click.option(
    "--dp-attention/--tp-attention",
    default=None,
    help="Data-parallel attention (default for MLA models) or tensor-parallel attention.",
)
@precision_option("weight")
@precision_option("kv")
@click.option(
    "--sequences",
    type=float,
    help="Sequences sharing the context (applies local-attention windows).",
)
@click.option(
    "--double-buffer/--no-double-buffer",
    default=True,
    show_default=True,
    help="Stage the next batch's KV while the current one runs (SEED-14).",
)
@click.option(
    "--headroom", type=float, default=None, help="Stage headroom fraction (default 0.05)."
)
@catalog_option
@json_option
def command(
    kv_bytes_per_token,
    context_tokens,
    model_name,
    hw_name,
    gpus,
    tp,
    ep,
    pp,
    gpus_per_stage,
    dp_attention,
    weight_precision,
    kv_precision,
    sequences,
    double_buffer,
    headroom,
    catalog_files,
    as_json,
) -> None:
    """Memory per pipeline stage (KV, double buffer, weights, activations, routing, headroom),
    or with --hw the HBM footprint per GPU of MODEL on GPUS of that system
    (agentx plan --model deepseek-v3 --hw h200 --gpus 8). SEED-14 with weights: agentx plan
    --kv-bytes-per-token 70000 --context-tokens 2e6 --model kimi-k2 --pp 8. A configuration
    that does not fit is an answer, not an error: the exit code stays 0, --json says "fits": false.
    """
    from agentx.catalog import load_catalog
    from agentx.replay import footprint as fp
    from agentx.replay import plan

    for name, v in (("--pp", pp), ("--gpus-per-stage", gpus_per_stage)):
        if v is not None and v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v}")
    if headroom is not None and not 0 <= headroom < 1:
        raise UsageError(f"--headroom must be a fraction in [0, 1), got {headroom}")

    cat = load_catalog(catalog_files) if (model_name or hw_name) else None
    model = cat.model(model_name) if model_name else None
    if hw_name:
        if model is None:
            raise UsageError("--hw needs --model (whose weights and KV to place)")
        from agentx.replay.config import make_config

        cfg = make_config(
            cat, hw_name, model.name, gpus=gpus, tp=tp, ep=ep, pp=pp,
            dp_attention=dp_attention, weight_precision=weight_precision,
            kv_precision=kv_precision,
        )  # fmt: skip
        foot = fp.footprint_per_gpu(
            cfg, context_tokens, double_buffer=double_buffer, sequences=sequences
        )
        tokens = fp.max_resident_tokens(cfg, double_buffer=double_buffer)
        rows = foot.as_rows()
        if as_json:
            emit_json(
                {
                    "config": fp.describe(cfg),
                    "footprint_bytes_per_gpu": {r["component"]: r["bytes_per_gpu"] for r in rows},
                    "fits": foot.fits,
                    "max_resident_tokens": tokens,
                }
            )
            return
        print_table(
            pl.DataFrame(
                [{"component": r["component"], "gb_per_gpu": r["bytes_per_gpu"] / GB} for r in rows]
            )
        )
        verdict = (
            "fits"
            if foot.fits
            else f"does not fit: short by {-foot.free_bytes / GB:.1f} GB per GPU"
        )
        click.echo(
            f"\n{model.name} on {fp.describe(cfg)}: {verdict}; HBM holds up to "
            f"{tokens:,.0f} context tokens{' double-buffered' if double_buffer else ''}"
        )
        return
    cfg = None
    if model is not None:
        cfg = plan.stage_config(
            model, pp=pp, gpus_per_stage=gpus_per_stage, weight_precision=weight_precision,
            kv_precision=kv_precision,
            # MLA deployments run data-parallel attention (NOTES.md (a)), as make_config does
            dp_attention=model.attention == "mla" if dp_attention is None else dp_attention,
        )  # fmt: skip
        cfg = _override(cfg, tp=tp or cfg.tp, ep=ep or cfg.ep)
    kwargs = {} if headroom is None else {"headroom": headroom}
    result = plan.plan_stage(
        context_tokens,
        kv_bytes_per_token=kv_bytes_per_token,
        cfg=cfg,
        double_buffer=double_buffer,
        **kwargs,
    )
    rows = result.as_rows()
    if as_json:
        emit_json(
            {
                "kv_bytes_per_token": result.kv_bytes_per_token,
                "context_tokens": context_tokens,
                "gpus_per_stage": result.gpus_per_stage,
                "config": fp.describe(cfg) if cfg else None,
                "bytes_per_stage": {r["component"]: r["bytes_per_stage"] for r in rows},
            }
        )
        return
    table = pl.DataFrame(
        [
            {
                "component": r["component"],
                "gb_per_stage": r["bytes_per_stage"] / GB,
                "gb_per_gpu": r["bytes_per_gpu"] / GB,
            }
            for r in rows
        ]
    )
    if cfg is None:  # only the KV terms exist without a model
        kv_terms = ("kv", "prefetch_buffer", "headroom", "total")
        table = table.drop("gb_per_gpu").filter(pl.col("component").is_in(kv_terms))
    print_table(table)
    click.echo(
        f"\n{result.kv_bytes_per_token:,.0f} B/token × {context_tokens:,.0f} tokens"
        + (f"; {model.name}, {fp.describe(cfg)}" if cfg else "")
    )


def _override(cfg, **changes):
    import dataclasses

    return dataclasses.replace(cfg, **changes)
