"""The constants of ``agentx.replay.kernel``'s compiled pass, derived once per configuration.

Owns ``Params`` (every scalar the kernel reads, as one NamedTuple: parfors take no dicts) and
``params`` (cached per ``ServingConfig``: the constants, the distinct-experts and measured-MoE
tables per tokens-in-pass, the per-token decode-experts costs). Plain Python and numpy, nothing
compiled: the kernel module keeps every jitted function together.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.config import layout
from agentx.replay.energy import coefficients
from agentx.replay.stages import (
    KEYS,
    decode_experts_step,
    distinct_experts,
    mla_mha_forms,
    moe_pass_s,
)


class Params(NamedTuple):
    n_layers: float
    n_global: float
    n_local: float
    window: float
    att_pair: float  # absorbed (or GQA) attention FLOPs per pair-layer
    mla: float
    mha_pair: float
    up_token_layer: float
    lin_token: float
    head_flops: float
    fill_weights: float  # attention + FFN weights per pass
    head_w: float
    expert_w: float  # expert replicas × MoE layers × bytes of one expert
    kv_rep: float
    kv_layer_b: float
    kv_token_b: float
    act_fill: float  # elementwise activation bytes per filled token
    act_att: float  # the attention-side part, per decoded token
    chunk: float
    ep_token: float
    su_frac: float
    tp_token: float  # attention-output all-reduce bytes per token
    ffn_ar_token: float  # FFN-output all-reduce bytes per filled token (TP-sharded FFN)
    xfer_su: float
    xfer_so: float
    floor_pass: float
    floor_att_tok: float  # attention launch floors of a step / batch
    # s per FLOP or byte by stage: a multiply, not a division (scalars: parfors take no tuples)
    ilin_pre: float
    iatt_pre: float
    imem_pre: float
    ilin_mid: float
    iatt_mid: float
    imem_mid: float
    ilin_da: float
    iatt_da: float
    imem_da: float
    isu: float
    iso: float
    static: float
    e_lin: float
    e_att: float
    e_hbm: float
    e_su: float
    e_so: float
    batch: float
    att_w_tok: float  # attention weights per decoded token: active replicas' read / batch
    att_lin_token: float
    att_replicas: float
    d_chunk: float  # distinct experts touched by a packed pass
    exp_step_time: float
    # Latency across pipeline stages (docs/metrics.md "What a time means"): a token crosses
    # every stage; the decode batch runs as mb = min(pp, B) micro-batches of B/mb sequences.
    pp: float
    micro_batch: float  # B / mb sequences per micro-batch
    att_w_micro: float  # attention weights per sequence of a micro-batch
    exp_step_micro: float  # decode-experts step of one micro-batch, without its floors
    floors_step: float  # launch floors of one decode step (attention + FFN), paid once
    # The engine's measured MoE layer (ServingConfig.extra["moe_kernel"]; zeros = roofline): its
    # seconds per pass replace the routed experts' roofline math of a fill (fill_cost).
    routed_token_flops: float  # routed-expert FLOPs per filled token
    moe_chunk_s: float  # routed experts of one packed pass of ``chunk`` tokens, seconds


@functools.lru_cache(maxsize=32)
def params(cfg: ServingConfig) -> tuple[Params, np.ndarray, np.ndarray]:
    """Kernel constants, the distinct-experts table per tokens-in-pass (0..chunk) followed by
    ``moe_pass_s`` at the same token counts (zeros without a measured MoE layer), and the
    per-token decode-experts costs in KEYS order."""
    from agentx.replay.collectives import ffn_all_reduce_bytes
    from agentx.replay.stages import _ep_bytes, _floor_per_pass, _tp_bytes

    lay, m, c = layout(cfg), cfg.model, coefficients(cfg)
    g, eff = lay.gpus, lay.eff
    effs = (eff.prefill, eff.midfill, eff.decode_attention)
    local = m.num_local_layers > 0
    mla = m.attention == "mla"
    mha, up = mla_mha_forms(m) if mla else (0.0, 0.0)
    pass_tokens = np.arange(cfg.prefill_chunk_tokens + 1, dtype=np.float64)
    per_rep = pass_tokens / lay.exp_replicas
    dtab = distinct_experts(cfg, per_rep) if m.is_moe else np.zeros_like(per_rep)
    d_chunk = float(dtab[-1])
    moe_on = m.is_moe and "moe_kernel" in cfg.extra
    # One array for the kernel (the pricing call keeps its signature); zeros without a measured
    # MoE layer, so the kernel runs the same branch-free (vectorized) arithmetic either way.
    moe = moe_pass_s(cfg, pass_tokens) if moe_on else np.zeros_like(pass_tokens)
    dtab = np.concatenate([dtab, moe])
    fa, ff = _floor_per_pass(cfg)
    xfer = cfg.pools == "disaggregated"
    xfer_su = xfer and cfg.system.scale_up_domain_gpus >= 2 * cfg.gpus
    b = float(cfg.decode_batch)
    step = decode_experts_step(cfg, b)
    micro = b / min(float(cfg.pp), max(b, 1.0))
    exp_micro = float(decode_experts_step(cfg, micro)["time_s"]) - ff
    p = Params(
        n_layers=m.num_layers,
        n_global=m.num_global_layers,
        n_local=m.num_local_layers,
        window=float(m.local_window_tokens) if local else 0.0,
        att_pair=m.attention_flops_per_pair(),
        mla=float(mla),
        mha_pair=mha,
        up_token_layer=up,
        lin_token=2.0 * (lay.attn_linear_params + lay.ffn_linear_params),
        head_flops=2.0 * lay.head_params,
        fill_weights=lay.attn_weight_bytes + lay.ffn_weight_bytes,
        head_w=lay.head_weight_bytes,
        expert_w=lay.exp_replicas * m.num_moe_layers * lay.expert_bytes if m.is_moe else 0.0,
        kv_rep=lay.kv_rep,
        kv_layer_b=m.kv_bytes_per_token_layer(cfg.kv_precision),
        kv_token_b=cfg.kv_bytes_per_token,
        act_fill=lay.act_attn_token_bytes + lay.act_ffn_token_bytes,
        act_att=lay.act_attn_token_bytes,
        chunk=float(cfg.prefill_chunk_tokens),
        ep_token=float(_ep_bytes(cfg, 1.0)),
        su_frac=lay.su_frac_ep,
        tp_token=float(_tp_bytes(cfg, lay, 1.0)),
        ffn_ar_token=float(ffn_all_reduce_bytes(cfg, 1.0)),
        xfer_su=float(xfer_su),
        xfer_so=float(xfer and not xfer_su),
        floor_pass=(fa + ff) / lay.att_replicas,
        floor_att_tok=fa / b,
        **{
            f"{k}_{st}": 1.0 / (g * rate * (e.memory if k == "imem" else e.compute))
            for st, e in zip(("pre", "mid", "da"), effs, strict=True)
            for k, rate in (
                ("ilin", lay.lin_flops_per_s),
                ("iatt", lay.att_flops_per_s),
                ("imem", lay.hbm_bytes_per_s),
            )
        },
        isu=1.0 / (g * cfg.system.scale_up_bytes_per_s * eff.communication),
        iso=1.0 / (g * cfg.system.scale_out_bytes_per_s * eff.communication),
        static=c.static_w * g,
        e_lin=c.lin_j_per_flop,
        e_att=c.att_j_per_flop,
        e_hbm=c.hbm_j_per_byte,
        e_su=c.scale_up_j_per_byte,
        e_so=c.scale_out_j_per_byte,
        batch=b,
        att_w_tok=min(lay.att_replicas, b) * lay.attn_weight_bytes / b,
        att_lin_token=2.0 * lay.attn_linear_params,
        att_replicas=float(lay.att_replicas),
        d_chunk=d_chunk,
        exp_step_time=float(step["time_s"]),
        pp=float(cfg.pp),
        micro_batch=micro,
        att_w_micro=min(lay.att_replicas, micro) * lay.attn_weight_bytes / micro,
        exp_step_micro=exp_micro,
        floors_step=fa + ff,
        routed_token_flops=2.0 * m.active_routed_params if moe_on else 0.0,
        moe_chunk_s=float(moe[-1]),  # 0 without a measured MoE layer
    )
    per_token = np.array([float(step[k]) / b for k in KEYS])
    return p, dtab, per_token
