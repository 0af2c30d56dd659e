"""``agentx models list|show``: model shapes, KV bytes per token, parameter groups."""

from __future__ import annotations

import dataclasses

import click
import polars as pl

from agentx.catalog.types import PRECISIONS
from agentx.cli._common import catalog_option, emit_json, json_option, print_table
from agentx.cli.cmd_hw import print_spec

# Parameter groups as ModelSpec derives them, in the order a reader adds them up.
PARAM_GROUPS = (
    "attention_params", "dense_ffn_params", "shared_expert_params", "routed_expert_params",
    "router_params", "embedding_params", "head_params", "computed_total_params",
    "computed_active_params",
)  # fmt: skip


@click.group("models", epilog="Example: agentx models show deepseek-v3")
def command() -> None:
    """Model catalog: shapes from config.json, derived KV bytes per token and parameters."""


@command.command("list", epilog="Example: agentx models list --json")
@catalog_option
@json_option
def list_cmd(catalog_files, as_json) -> None:
    """One line per model: size, attention kind, KV bytes per token (all layers)."""
    from agentx.catalog import load_catalog

    cat = load_catalog(catalog_files)
    if as_json:
        emit_json([describe(m) for m in cat.models.values()])
        return
    rows = [
        {
            "name": m.name,
            "attention": m.attention,
            "total_params_billions": m.total_params / 1e9,
            "active_params_billions": m.active_params / 1e9,
            "layers": m.num_layers,
            "experts": m.n_routed_experts,
            "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"),
            "kv_bytes_per_token_fp8": m.kv_bytes_per_token("fp8"),
            "max_context_tokens": m.max_context_tokens,
        }
        for m in cat.models.values()
    ]
    print_table(pl.DataFrame(rows))


@command.command("show", epilog="Example: agentx models show gpt-oss-120b --json")
@click.argument("name")
@catalog_option
@json_option
def show_cmd(name, catalog_files, as_json) -> None:
    """Shape of model NAME, its KV bytes per token per precision and its parameter groups."""
    from agentx.catalog import load_catalog

    info = describe(load_catalog(catalog_files).model(name))
    if as_json:
        emit_json(info)
        return
    print_spec(info["spec"])
    click.echo("\nKV bytes per token (all layers; past the local window only global layers grow):")
    print_table(pl.DataFrame(info["kv"]))
    click.echo("\nparameters per group:")
    print_table(pl.DataFrame(info["params"]))


def describe(m) -> dict:
    """Catalog fields plus what agentx derives from them, JSON-ready."""
    kv = [
        {
            "precision": p,
            "kv_bytes_per_token": m.kv_bytes_per_token(p),
            # growth per token once every local window is full
            "kv_bytes_per_token_long_context": m.kv_bytes_per_token_layer(p) * m.num_global_layers,
        }
        for p in PRECISIONS
    ]
    params = [
        {"group": g.removesuffix("_params"), "params_billions": getattr(m, g) / 1e9}
        for g in PARAM_GROUPS
    ]
    return {"spec": dataclasses.asdict(m), "kv": kv, "params": params}
