"""``agentx hw list|show``: the systems (``--hw`` names) and the chips inside them."""

from __future__ import annotations

import dataclasses

import click
import polars as pl

from agentx.cli._common import catalog_option, emit_json, json_option, print_table
from agentx.fmt import num
from agentx.units import GB, display


@click.group("hw", epilog="Example: agentx hw show gb200 --json")
def command() -> None:
    """Accelerator systems: chip, scale-up domain, links, host memory, SSD (per GPU)."""


@command.command("list", epilog="Example: agentx hw list --catalog my.toml")
@catalog_option
@json_option
def list_cmd(catalog_files, as_json) -> None:
    """One line per system, with the headline numbers of its chip (dense FLOP/s)."""
    from agentx.catalog import load_catalog

    cat = load_catalog(catalog_files)
    if as_json:
        emit_json([dataclasses.asdict(s) for s in cat.systems.values()])
        return
    rows = [
        {
            "name": s.name,
            "chip": s.chip.display_name,
            "scale_up_gpus": s.scale_up_domain_gpus,
            "hbm_gb": s.chip.hbm_bytes / GB,
            "hbm_tb_per_s": s.chip.hbm_bytes_per_s / 1e12,
            "bf16_tflops": s.chip.bf16_flops_per_s / 1e12,
            "fp8_tflops": _scaled(s.chip.fp8_flops_per_s, 1e12),
            "fp4_tflops": _scaled(s.chip.fp4_flops_per_s, 1e12),
            "tdp_w": s.chip.tdp_w,
            "scale_up_gb_per_s": s.scale_up_bytes_per_s / GB,
            "host_link": s.host_link,
        }
        for s in cat.systems.values()
    ]
    print_table(pl.DataFrame(rows, infer_schema_length=None))


@command.command("show", epilog="Example: agentx hw show b300")
@click.argument("name")
@catalog_option
@json_option
def show_cmd(name, catalog_files, as_json) -> None:
    """Every field of system NAME and of its chip, with units in the names and sources."""
    from agentx.catalog import load_catalog

    system = load_catalog(catalog_files).system(name)
    data = dataclasses.asdict(system)
    if as_json:
        emit_json(data)
        return
    chip = data.pop("chip")
    print_spec(data)
    click.echo(f"\nchip {chip['name']}:")
    print_spec(chip)


def print_spec(data: dict) -> None:
    """A (field, value) table of a spec, numbers in the catalog's units (named in the key);
    the long free-text fields follow the table."""
    text = {k: data[k] for k in ("source", "notes") if data.get(k)}
    rest = dict(display(k, v) for k, v in data.items() if k not in ("source", "notes"))
    print_table(
        pl.DataFrame(
            {"field": list(rest), "value": [_text(v) for v in rest.values()]},
            schema={"field": pl.String, "value": pl.String},
        )
    )
    for key, value in text.items():
        click.echo(f"{key}: {value}")


def _scaled(v: float | None, unit: float) -> float | None:
    return None if v is None else v / unit


def _text(v: object) -> str:
    if v is None:
        return "(not published)"
    return num(v)  # the one number format (agentx.fmt), as every table
