"""Modelled vs measured serving points: the steady-state model run at each measured row.

``deployment_for`` maps a ``Point`` to agentx serving configurations (per-component precision
from what each checkpoint ships, per-worker layout from the parallelism string);
``validate_points`` returns one record per (row, metric) with the ratio modelled / measured.
Acceptance figures (docs/validation.md) are taken over the *acceptance set*: single-node,
no speculative decoding, not flagged saturated (SOURCES.md "Saturated points").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.config import make_config
from agentx.serving.gemm_kernels import attn_gemm_kernel
from agentx.serving.kernels import mla_decode_latency, moe_kernel
from agentx.serving.points import BF16_KV_ENGINES, METRICS, Point, Worker
from agentx.serving.recipes import Recipe, engine_kv_tokens, recipe_draft_tokens, recipe_for
from agentx.serving.steady import (
    Speculation,
    benchmark_window_factor,
    disaggregated_steady_state,
    steady_state,
)

# SGLang runs prefill batches on their own (decodes wait) unless --enable-mixed-chunk is given
# (SGLang server arguments, default off); vLLM V1 and TRT-LLM mix chunks into decode steps.
SEPARATE_PREFILL_ENGINES = ("sglang",)
# Applied to the measured SGLang rows: no InferenceX DSR1 launch script passes
# --enable-mixed-chunk (benchmarks/single_node/dsr1_*.sh, SemiAnalysisAI/InferenceX @ d2ee68c7)
# and ServerArgs.enable_mixed_chunk defaults to False (sgl-project/sglang server_args.py).
SGLANG_PREFILL_APART = True

# Per-component formats of the measured checkpoints (SOURCES.md "FP4 checkpoints"):
#   DSR1 FP4 on NVIDIA = nvidia/DeepSeek-R1-0528-FP4: NVFP4 routed experts, the rest kept in the
#     base checkpoint's FP8 [E: ModelOpt quantises the MoE GEMMs; attention stays FP8].
#   DSR1 FP4 on AMD = amd/DeepSeek-R1-0528-MXFP4: MXFP4 linear layers (Quark) incl. attention.
#   Kimi K2.5 INT4 = native W4A16 routed experts (QAT), BF16 attention (moonshotai card).
#   Kimi K2.5 NVFP4 / MXFP4 = experts in that format, attention BF16 [E].
#   gpt-oss-120b = MXFP4 experts, BF16 attention (model card; NOTES.md (a)).
#   Llama-3.3-70B FP4 = NVFP4 everywhere (ModelOpt), FP8 = FP8 everywhere.
_FORMATS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("deepseek-v3", "fp8", "*"): ("fp8", "fp8"),
    ("deepseek-v3", "fp4", "NVIDIA"): ("fp8", "nvfp4"),
    ("deepseek-v3", "fp4", "AMD"): ("mxfp4", "mxfp4"),
    ("kimi-k2", "int4", "*"): ("bf16", "int4"),
    ("kimi-k2", "fp4", "NVIDIA"): ("bf16", "nvfp4"),
    ("kimi-k2", "fp4", "AMD"): ("bf16", "mxfp4"),
    ("gpt-oss-120b", "fp4", "*"): ("bf16", "mxfp4"),
    ("llama3.1-70b", "fp4", "*"): ("nvfp4", "nvfp4"),
    ("llama3.1-70b", "fp8", "*"): ("fp8", "fp8"),
}


def formats(model: str, precision: str, vendor: str) -> tuple[str, str]:
    """(attention/dense weight format, routed-expert format) of a measured checkpoint."""
    for key in ((model, precision, vendor), (model, precision, "*")):
        if key in _FORMATS:
            return _FORMATS[key]
    return precision, precision


@dataclass(frozen=True)
class Deployment:
    """What ran: one pool (``cfg``) or a prefill and a decode pool, and the speculation."""

    cfg: ServingConfig | None
    prefill_cfg: ServingConfig | None = None
    prefill_workers: int = 0
    decode_cfg: ServingConfig | None = None
    decode_workers: int = 0
    spec: Speculation = Speculation()
    recipe: Recipe | None = None  # single node: the launch script's engine settings


def _recipe(p: Point) -> Recipe:
    w = p.worker
    return recipe_for(
        p.framework,
        p.hardware,
        p.precision,
        w.tp,
        w.dp_attention,
        p.concurrency,
        ep=w.ep,
        isl_tokens=p.isl_tokens,
        measured_date=p.measured_date,
    )


def _cfg(catalog, p: Point, w: Worker, pools: str, kv: str | None = None) -> ServingConfig:
    system = catalog.system(p.hardware)
    weight, expert = formats(p.model, p.precision, system.chip.vendor)
    if kv is None:
        kv = "bf16" if p.framework in BF16_KV_ENGINES else "fp8"
    spec = catalog.model(p.model)
    # MoE under "ep1" is tensor-sliced: one copy of every expert spread over the worker, which
    # for weight bytes is the same as experts spread over all its GPUs.
    ep = min(w.gpus, spec.n_routed_experts) if spec.is_moe else 1
    while spec.is_moe and w.gpus % ep:
        ep -= 1
    return make_config(
        catalog,
        p.hardware,
        p.model,
        gpus=w.gpus,
        tp=w.tp if not w.dp_attention else min(w.tp, w.gpus),
        ep=ep,
        dp_attention=w.dp_attention,
        weight_precision=weight,
        expert_precision=expert,
        kv_precision=kv,
        pools=pools,
    )


def row_speculation(p: Point, spec: Speculation | None) -> Speculation:
    """What a row ran: no speculation unless it is an MTP row and ``spec`` is given; a ``spec``
    with ``draft_tokens`` 0 takes the row's launch recipe's draft length (else 1)."""
    if spec is None or not p.spec:
        return Speculation()
    if spec.draft_tokens > 0:
        return spec
    w = p.worker or p.decode
    d = recipe_draft_tokens(
        p.framework, p.hardware, p.precision, p.isl_tokens, p.concurrency, w.dp_attention
    )
    return Speculation(d or 1, spec.acceptance)


def deployment_for(catalog, p: Point, spec: Speculation | None = None) -> Deployment:
    s = row_speculation(p, spec)
    if not p.disagg:
        r = _recipe(p)
        cfg = _cfg(catalog, p, p.worker, "aggregated", r.kv_precision)
        w, (weight, expert) = p.worker, formats(p.model, p.precision, cfg.chip.vendor)
        kernel = moe_kernel(p.framework, p.hardware, p.model, expert, w.tp, w.ep)
        mla = mla_decode_latency(p.hardware, cfg.model.attention)
        proj = attn_gemm_kernel(p.framework, p.hardware, p.model, weight, cfg.tp, cfg.dp_attention)
        extra = {"moe_kernel": kernel, "mla_decode_latency": mla, "attn_gemm_kernel": proj}
        extra = {k: v for k, v in extra.items() if v is not None}
        if extra:
            cfg = replace(cfg, extra={**cfg.extra, **extra})
        return Deployment(cfg=cfg, spec=s, recipe=r)
    return Deployment(
        cfg=None,
        prefill_cfg=_cfg(catalog, p, p.prefill, "disaggregated"),
        prefill_workers=p.prefill_workers,
        decode_cfg=_cfg(catalog, p, p.decode, "disaggregated"),
        decode_workers=p.decode_workers,
        spec=s,
    )


def check_points(path, catalog, points: list[Point]) -> None:
    """Every row's layout must be one agentx can build; else one line naming file, row, field."""
    from agentx.errors import AgentxError, InputError

    for p in points:
        try:
            deployment_for(catalog, p)
        except AgentxError as err:
            msg = str(err).replace("--", "")
            w = p.worker or p.decode
            raise InputError(
                path,
                f"tp{w.tp} ep{w.ep} on {w.gpus} GPUs cannot be served: {msg}",
                row=p.row,
                field="parallelism",
            ) from None


def model_point(catalog, p: Point, spec: Speculation | None = None) -> dict[str, float]:
    """Modelled metrics of one measured point (same names and units as the CSV)."""
    d = deployment_for(catalog, p, spec)
    if d.cfg is not None:
        r = steady_state(
            d.cfg,
            p.concurrency,
            p.isl_tokens,
            p.osl_tokens,
            spec=d.spec,
            mixed_prefill=p.framework not in SEPARATE_PREFILL_ENGINES
            if SGLANG_PREFILL_APART
            else True,
            kv_capacity_tokens=engine_kv_tokens(d.cfg, d.recipe),
            admission_interval_iters=d.recipe.admission_interval_iters,
            balance_ranks=d.recipe.balance_ranks,
            prefill_floor_s=d.recipe.prefill_floor_s(d.cfg.model.num_layers),
        )
    else:
        r = disaggregated_steady_state(
            d.prefill_cfg,
            d.prefill_workers,
            d.decode_cfg,
            d.decode_workers,
            p.concurrency,
            p.isl_tokens,
            p.osl_tokens,
            spec=d.spec,
        )
    # The measured rate is over a finite run of ~10 requests per client, drain included.
    window = benchmark_window_factor(p.concurrency, r["ttft_s"], r["tpot_s"], p.osl_tokens)
    return {
        "tpot_ms": 1e3 * float(r["tpot_s"]),
        "ttft_ms": 1e3 * float(r["ttft_s"]),
        "output_tok_s_per_gpu": float(r["output_tok_s_per_gpu"] * window),
        "output_tok_s_per_user": float(r["output_tok_s_per_user"]),
    }


def validate_points(
    catalog, points: list[Point], spec: Speculation | None = None
) -> tuple[list[dict], list[dict]]:
    """(records {row, metric, measured, modelled, ratio, acceptance}, skipped {row, reason})."""
    out, skipped = [], []
    for p in points:
        if p.spec and spec is None:
            skipped.append(
                {"row": p.row, "reason": "speculative decoding (MTP) row: pass an acceptance rate"}
            )
            continue
        got = model_point(catalog, p, spec)
        accept = p.single_node and not p.spec and not p.saturated
        for k in METRICS:
            if k in p.measured:
                out.append(
                    {
                        "row": p.row,
                        "metric": k,
                        "measured": p.measured[k],
                        "modelled": got[k],
                        "ratio": got[k] / p.measured[k],
                        "acceptance": accept,
                        "group": p.group,
                    }
                )
    return out, skipped


def summary(records: list[dict], metric: str | None = None) -> dict[str, float]:
    """median, p90 and worst of |modelled / measured − 1| (fractions), and the count."""
    e = np.array(
        [abs(r["ratio"] - 1.0) for r in records if metric is None or r["metric"] == metric]
    )
    if e.size == 0:
        return {"n": 0, "median": float("nan"), "p90": float("nan"), "worst": float("nan")}
    return {
        "n": int(e.size),
        "median": float(np.median(e)),
        "p90": float(np.quantile(e, 0.9)),
        "worst": float(e.max()),
    }
