"""Serving configurations: parallel layout defaults, per-stage efficiencies and derived layout.

``make_config`` turns a catalog, a system name, a model name and a GPU count into a frozen
``ServingConfig``; ``layout`` derives once per configuration everything the closed forms in
``agentx.replay.stages`` need (replicas, weight bytes per group, KV replication, link shares).
Default efficiencies are cited from ``../shared/reference/NOTES.md`` (d); none is tuned to a
validation point (docs/validation.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentx.catalog.types import (
    BYTES_PER_ELEMENT,
    COMPUTE_OF,
    PRECISIONS,
    WEIGHT_FORMATS,
    Efficiencies,
    ServingConfig,
    StageEfficiency,
    SystemSpec,
)
from agentx.errors import UnknownNameError, UsageError

# Real layers reach ~85 % of the best-shape matmul rate: FlashMLA/FA prefill 64-67 % of peak
# against MAMF 73-78 % on the same chips (NOTES.md (d)). Used where a chip has a MAMF figure.
REAL_OVER_MAMF = 0.85
FALLBACK_COMPUTE = 0.6  # chips without a MAMF measurement (TPU, GB300): low end of 60-75 %
POOLS = ("disaggregated", "aggregated")
# Serving engines whose measured kernel tables replay can use (agentx.serving.kernels).
ENGINES = ("atom", "sglang", "trt", "vllm")


def default_efficiencies(system: SystemSpec, precision: str = "fp8") -> Efficiencies:
    """Per-stage achieved fractions of peak for ``system``'s chip computing in ``precision``
    (NOTES.md (d)); the FP8 MAMF figure is used for FP8/FP4 matmuls where measured.

    A system's ``calibrated_*_scale`` fields (written by ``agentx calibrate``, 1.0 in the
    built-in catalog) multiply these defaults; fractions of peak are capped at 1.
    """
    chip = system.chip
    fp8 = getattr(chip, "mamf_fp8_fraction", None)
    mamf = fp8 if precision != "bf16" and fp8 else chip.mamf_fraction
    compute = round(REAL_OVER_MAMF * mamf, 3) if mamf else FALLBACK_COMPUTE
    c_src = "0.85 x MAMF (NOTES.md (d): prefill 64-67 % vs MAMF 73-78 %)"
    sc, sm = system.calibrated_compute_scale, system.calibrated_hbm_scale
    compute = min(1.0, compute * sc)

    def mem(x: float) -> float:
        return min(1.0, x * sm)

    return Efficiencies(
        prefill=StageEfficiency(
            compute, mem(0.85), f"compute {c_src}; memory FlashMLA 90 %, NOTES.md (d)"
        ),
        midfill=StageEfficiency(
            compute, mem(0.85), f"compute {c_src}; memory as long-context decode, NOTES.md (d)"
        ),
        decode_attention=StageEfficiency(
            compute,
            mem(0.85),
            "memory 0.85-0.9 long-context decode with tuned kernels (FlashMLA 3000 GB/s = 90 % on H800), NOTES.md (d)",
        ),
        decode_experts=StageEfficiency(
            compute,
            mem(0.70),
            "memory 0.6-0.8 for small batches / short rows (grouped GEMV over expert weights), NOTES.md (d)",
        ),
        communication=min(1.0, 0.7 * system.calibrated_comm_scale),
        kernel_floor_s=5e-6 * system.calibrated_floor_scale,
    )


def default_gpus(system) -> int:
    """GPUs of one model instance when the user names none: the one default of every command
    (replay, kv-curve, simulate, plan --hw; ``agentx.cli._common.gpus_option``). A scale-up
    domain that spans nodes (NVL72) serves an instance of 32 GPUs, elsewhere one node does."""
    if system.scale_up_domain_gpus > system.gpus_per_node:
        return min(system.scale_up_domain_gpus, 32)
    return system.gpus_per_node


def make_config(
    catalog,
    hw: str,
    model: str = "kimi-k2",
    gpus: int | None = None,
    tp: int | None = None,
    ep: int | None = None,
    pp: int = 1,
    dp_attention: bool | None = None,
    weight_precision: str = "fp8",
    kv_precision: str = "fp8",
    expert_precision: str | None = None,
    decode_batch: int = 64,
    prefill_chunk_tokens: int = 8192,
    routing_skew: float = 0.0,
    pools: str = "disaggregated",
    efficiencies: Efficiencies | None = None,
    engine: str | None = None,
) -> ServingConfig:
    """A serving configuration with defaults a deployment would pick.

    Defaults: ``gpus`` = one node (or 32 on rack-scale systems); MLA models run data-parallel
    attention (the latent KV would otherwise be replicated on every TP rank, NOTES.md (a)) and
    GQA models tensor-parallel attention over min(8, node); experts spread over all GPUs of a
    pipeline stage (capped at the expert count).

    ``engine`` (``ENGINES``; default None = roofline everywhere): the serving engine whose
    measured routed-MoE kernel times price the fills where a table exists for this model,
    expert format and layout (``ServingConfig.extra["moe_kernel"]``; ``engine_note`` says when
    none does).
    """
    system = catalog.system(hw)
    spec = catalog.model(model)
    checks = (("weight", weight_precision, WEIGHT_FORMATS), ("kv", kv_precision, PRECISIONS))
    if expert_precision is not None:
        checks += (("expert", expert_precision, WEIGHT_FORMATS),)
    for name, p, allowed in checks:
        if p not in allowed:
            raise UsageError(f"unknown {name} precision '{p}'; choose one of {', '.join(allowed)}")
    if pools not in POOLS:
        raise UsageError(f"unknown pools '{pools}'; choose one of {', '.join(POOLS)}")
    if engine is not None and engine not in ENGINES:
        raise UnknownNameError("serving engine", engine, ENGINES)
    if gpus is None:
        gpus = default_gpus(system)
    _positive(
        gpus=gpus, pp=pp, decode_batch=decode_batch, prefill_chunk_tokens=prefill_chunk_tokens
    )
    if not routing_skew >= 0:  # NaN too
        raise UsageError(f"--routing-skew must be ≥ 0, got {routing_skew}")
    if gpus % pp:
        raise UsageError(f"--pp {pp} does not divide --gpus {gpus}")
    stage_gpus = gpus // pp
    if dp_attention is None:
        dp_attention = spec.attention == "mla" and tp is None
    if tp is None:
        tp = 1 if dp_attention else min(8, stage_gpus, system.gpus_per_node)
    if ep is None:
        ep = _largest_divisor(stage_gpus, spec.n_routed_experts) if spec.is_moe else 1
    _positive(tp=tp, ep=ep)
    if not dp_attention and tp > system.scale_up_domain_gpus:
        # Tensor-parallel all-reduces run every layer; agentx prices them on the scale-up links.
        raise UsageError(
            f"--tp {tp} exceeds the {system.scale_up_domain_gpus}-GPU scale-up domain of {system.name}"
        )
    if not dp_attention and stage_gpus % tp:
        raise UsageError(f"--tp {tp} does not divide the {stage_gpus} GPUs of a pipeline stage")
    if stage_gpus % ep:
        raise UsageError(f"--ep {ep} does not divide the {stage_gpus} GPUs of a pipeline stage")
    if spec.is_moe and ep > spec.n_routed_experts:
        raise UsageError(
            f"--ep {ep} exceeds the {spec.n_routed_experts} routed experts of {spec.name}"
        )
    compute = COMPUTE_OF[weight_precision]
    extra = {} if engine is None else {"engine": engine}
    if engine is not None and spec.is_moe:
        from agentx.serving.kernels import moe_kernel

        # Replay spreads whole experts over ``ep`` ranks (layout.exp_replicas copies of the
        # set); it has no tensor-sliced experts, so the table asked for is (1, ep).
        expert = expert_precision or weight_precision
        kernel = moe_kernel(engine, system.name, spec.name, expert, 1, ep)
        if kernel is not None:
            extra["moe_kernel"] = kernel
    return ServingConfig(
        system=system,
        model=spec,
        gpus=gpus,
        tp=tp,
        pp=pp,
        ep=ep,
        dp_attention=bool(dp_attention),
        weight_precision=weight_precision,
        kv_precision=kv_precision,
        expert_precision=expert_precision,
        compute_precision=compute,
        decode_batch=decode_batch,
        prefill_chunk_tokens=prefill_chunk_tokens,
        routing_skew=float(routing_skew),
        pools=pools,
        efficiencies=efficiencies or default_efficiencies(system, compute),
        extra=extra,
    )


def engine_note(cfg: ServingConfig) -> str | None:
    """One line when an engine was asked for but no measured MoE table fits the layout."""
    engine = cfg.extra.get("engine")
    if engine is None or "moe_kernel" in cfg.extra or not cfg.model.is_moe:
        return None
    expert = cfg.expert_precision or cfg.weight_precision
    return (
        f"no measured {engine} MoE kernel for {cfg.model.name} {expert} experts on "
        f"{cfg.system.name} tp{cfg.tp} ep{cfg.ep}: routed experts priced by the roofline"
    )


def _positive(**kw: int) -> None:
    for k, v in kw.items():
        if v is None or v < 1:
            raise UsageError(f"--{k.replace('_', '-')} must be a positive integer, got {v}")


def _largest_divisor(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


@dataclass(frozen=True)
class Layout:
    """Quantities derived once per configuration (bytes are whole-instance, per forward pass)."""

    gpus: int
    att_tp: int  # GPUs sharing one sequence's attention (1 with data-parallel attention)
    att_replicas: int  # independent attention groups in the instance
    exp_replicas: int  # copies of the full expert set
    kv_rep: float  # copies of each sequence's KV read/written (MLA latent on every TP rank)
    attn_weight_bytes: float  # attention projections, all layers, one copy
    ffn_weight_bytes: float  # dense FFN layers + shared experts + router, one copy
    head_weight_bytes: float  # LM head (read once per forward pass that emits logits)
    expert_bytes: float  # one routed expert of one MoE layer
    attn_linear_params: float  # per token, incl. MLA down-projections repeated on TP ranks
    ffn_linear_params: float  # per token: dense FFN + shared + router + k routed experts
    head_params: float  # LM head, per token that needs logits
    act_attn_token_bytes: float  # elementwise activation traffic per token, attention side
    act_ffn_token_bytes: float  # the same, FFN/expert side (norm, SwiGLU, permute, combine)
    lin_flops_per_s: float  # per GPU, linear layers at the compute precision
    att_flops_per_s: float  # per GPU, attention math (BF16)
    hbm_bytes_per_s: float
    su_frac_ep: float  # share of expert-parallel traffic that stays in the scale-up domain
    eff: Efficiencies


@functools.lru_cache(maxsize=64)
def layout(cfg: ServingConfig) -> Layout:
    m, chip = cfg.model, cfg.chip
    att_tp = 1 if cfg.dp_attention else cfg.tp
    wb = BYTES_PER_ELEMENT[cfg.weight_precision]
    if m.attention == "mla":
        kv_rep = float(att_tp)
        down = m.num_layers * m.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        kv_rep = max(1.0, att_tp / max(m.num_kv_heads, 1))
        down = 0.0
    ffn = m.dense_ffn_params + m.shared_expert_params + m.router_params
    dom = cfg.system.scale_up_domain_gpus
    act_attn, act_ffn = activation_bytes_per_token(cfg, att_tp)
    return Layout(
        gpus=cfg.gpus,
        att_tp=att_tp,
        att_replicas=max(1, cfg.gpus // (att_tp * cfg.pp)),
        exp_replicas=max(1, cfg.gpus // (cfg.ep * cfg.pp)),
        kv_rep=kv_rep,
        attn_weight_bytes=m.attention_params * wb,
        ffn_weight_bytes=ffn * wb,
        head_weight_bytes=m.head_params * wb,
        expert_bytes=m.expert_params * cfg.expert_bytes_per_param,
        attn_linear_params=m.attention_params + (att_tp - 1) * down,
        ffn_linear_params=ffn + m.active_routed_params,
        head_params=m.head_params,
        act_attn_token_bytes=act_attn,
        act_ffn_token_bytes=act_ffn,
        lin_flops_per_s=chip.flops_per_s(cfg.compute_precision),
        att_flops_per_s=chip.flops_per_s("bf16"),
        hbm_bytes_per_s=chip.hbm_bytes_per_s,
        su_frac_ep=1.0 if cfg.ep <= dom else (dom - 1) / (cfg.ep - 1),
        eff=cfg.efficiencies or default_efficiencies(cfg.system, cfg.compute_precision),
    )


def activation_bytes_per_token(cfg: ServingConfig, att_tp: int) -> tuple[float, float]:
    """HBM bytes per token of the memory-bound elementwise kernels between the GEMMs, all
    layers, whole instance: (attention side, FFN/expert side) [E, from the TRT-LLM layer graph].

    A GEMM roofline counts weights and KV but not these kernels, whose work is pure activation
    traffic that no matmul hides (docs/metrics.md, "Activation traffic"): per layer two fused
    residual-add + RMSNorm (read x and residual, write both: 4h), run on every rank that holds
    the residual stream (all att_tp ranks under tensor-parallel attention); SwiGLU per FFN
    (read 2I, write I); per routed assignment a permute into the expert's buffer (2h) and, per
    token, the weighted combine (read k outputs, write 1: (k+1)h).
    """
    m, b = cfg.model, cfg.activation_bytes
    h, norm = m.hidden_size, 4.0 * m.hidden_size * b * att_tp
    dense = (m.num_layers - m.num_moe_layers) * 3.0 * m.dense_intermediate_size * b
    moe = 0.0
    if m.is_moe:
        i, k = m.moe_intermediate_size, m.experts_per_token
        moe = (
            m.num_moe_layers
            * b
            * (m.n_shared_experts * 3.0 * i + k * (2.0 * h + 3.0 * i) + (k + 1.0) * h)
        )
    return m.num_layers * norm, m.num_layers * norm + dense + moe
