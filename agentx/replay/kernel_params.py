"""The constants of ``agentx.replay.kernel``'s compiled pass, derived once per configuration.

Owns ``params`` (cached per ``ServingConfig``: the kernel's ``Params``, the distinct-experts
and measured-MoE tables per tokens-in-pass, the per-token decode-experts costs). Plain Python
and numpy, nothing compiled. ``Params`` itself (the kernel's argument layout) stays in
``agentx.replay.kernel``: numba's cache is checked against the kernel's own file only, so an
edit of the fields elsewhere could leave a stale compiled kernel reading them by position.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from agentx.replay.kernel import Params


@functools.lru_cache(maxsize=32)
def params(cfg: ServingConfig) -> tuple[Params, np.ndarray, np.ndarray]:
    """Kernel constants, the distinct-experts table per tokens-in-pass (0..chunk) followed by
    ``moe_pass_s`` at the same token counts (zeros without a measured MoE layer), and the
    per-token decode-experts costs in KEYS order."""
    from agentx.replay.collectives import ffn_all_reduce_bytes
    from agentx.replay.kernel import Params
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
