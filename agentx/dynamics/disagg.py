"""Disaggregated vs aggregated serving of the same trace, per system (SEED-17, SEED-20).

Disaggregated: ``fill_gpus`` run fills, the rest decode; after each fill the call's KV
(prefix + new tokens, and again after a preemption) moves to the decode pool, inside the
scale-up domain when both pools fit in it (all of an NVL72 rack) or over the scale-out
network otherwise (8-GPU HGX nodes). Aggregated: one pool of all GPUs; each decode step
carries up to ``chunk_tokens`` of pending fill work, so fills stall decode (interference)
but no KV moves. The table reports both costs side by side.
"""

from __future__ import annotations

import polars as pl

from agentx.dynamics.admission import AdmissionPolicy
from agentx.dynamics.engine import SimConfig, simulate
from agentx.dynamics.service import CostModelService

TABLE_COLUMNS = (
    "system",
    "gpus",
    "pools",
    "fill_gpus",
    "decode_gpus",
    "kv_link",
    "done",
    "dropped",
    "preemptions",
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p99",
    "e2e_s_p50",
    "output_tokens_per_s_per_gpu",
    "energy_per_output_token_j",
    "mean_utilisation",
    "kv_moved_bytes",
    "kv_moved_bytes_per_call",
    "kv_transfer_s",
    "kv_transfer_s_per_call",
    "fill_share_of_steps",
)


def build_pools(
    catalog, hw: str, model: str, gpus: int, pools: str, fill_gpus: int | None = None, **kw
):
    """(fill service, decode service, link name) for one layout."""
    if pools == "aggregated":
        svc = CostModelService.build(catalog, hw, model, gpus, **kw)
        return svc, svc, "none"
    nf = fill_gpus if fill_gpus is not None else max(1, gpus // 2)
    if not 0 < nf < gpus:
        from agentx.errors import UsageError

        raise UsageError(f"--fill-gpus must be between 1 and {gpus - 1} for {gpus} GPUs, got {nf}")
    fill = CostModelService.build(catalog, hw, model, nf, **kw)
    decode = CostModelService.build(catalog, hw, model, gpus - nf, **kw)
    return fill, decode, "scale-out" if fill.crosses_scale_out(decode.gpus) else "scale-up"


RESIZE_STEP_GPUS = 8  # pools grow and shrink by one 8-GPU node


def resize_layouts(catalog, hw: str, model: str, gpus: int, fill, decode, **layout) -> list:
    """Every split in whole nodes whose two pools both hold the weights, plus the starting one,
    ordered by fill-pool size (the minute-level controller moves one step at a time)."""
    from agentx.errors import CapacityError, UsageError

    layouts = {fill.gpus: (fill, decode)}
    for nf in range(RESIZE_STEP_GPUS, gpus, RESIZE_STEP_GPUS):
        if nf in layouts:
            continue
        try:
            pair = (CostModelService.build(catalog, hw, model, nf, **layout),
                    CostModelService.build(catalog, hw, model, gpus - nf, **layout))  # fmt: skip
        except (CapacityError, UsageError):  # e.g. --tp does not divide this pool
            continue
        layouts[nf] = pair
    return [layouts[k] for k in sorted(layouts)]


def run_layout(
    calls: pl.DataFrame,
    catalog,
    hw: str,
    model: str,
    gpus: int,
    pools: str,
    policy: AdmissionPolicy | None = None,
    cfg: SimConfig | None = None,
    fill_gpus: int | None = None,
    **layout,
):
    """``layout``: make_config's layout and precision keywords (tp, ep, weight_precision, …)."""
    fill, decode, link = build_pools(catalog, hw, model, gpus, pools, fill_gpus, **layout)
    cfg = SimConfig(**{**(cfg.__dict__ if cfg else {}), "pools": pools})
    layouts = None
    if cfg.resize_pools and pools == "disaggregated":
        layouts = resize_layouts(catalog, hw, model, gpus, fill, decode, **layout)
    res = simulate(calls, fill, decode, policy, cfg, layouts)
    res.summary.update(system=hw, gpus=gpus, model=model, kv_link=link)
    return res


def table_row(summary: dict) -> dict:
    s = summary
    done = max(s["done"], 1)
    moved_calls = max(s["calls"] - s["not_arrived"], 1)
    return {
        **{k: s.get(k) for k in TABLE_COLUMNS if k in s},
        "output_tokens_per_s_per_gpu": s["output_tokens"] / max(s["span_s"], 1e-9) / s["gpus"],
        "kv_moved_bytes_per_call": s["kv_moved_bytes"] / moved_calls,
        "kv_transfer_s_per_call": s["kv_transfer_s"] / done,
    }


def compare_pools(
    calls: pl.DataFrame,
    catalog,
    systems,
    gpus: int,
    model: str = "kimi-k2",
    policy: AdmissionPolicy | None = None,
    cfg: SimConfig | None = None,
) -> pl.DataFrame:
    """One row per (system, pool layout): latency, throughput, energy, KV moved and its time."""
    rows = []
    for hw in systems:
        for pools in ("disaggregated", "aggregated"):
            rows.append(
                table_row(run_layout(calls, catalog, hw, model, gpus, pools, policy, cfg).summary)
            )
    return pl.DataFrame(rows).select(TABLE_COLUMNS)
