"""Closed forms for the four stages (SEED-1): prefill, midfill, decode attention, decode experts.

Every function takes numpy arrays (or scalars) and broadcasts; there is no per-call loop.
Quantities are whole-instance totals: FLOPs, HBM bytes (weights + KV read + KV write) and
link bytes summed over all GPUs, including replicated work (the MLA latent read by every
tensor-parallel rank, NOTES.md (a)). ``time_s`` is instance-seconds: how long the whole
instance is busy with this work when it is spread evenly over its GPUs. Time per forward
pass is a two-part roofline (linear layers against weight bytes, then attention math against
KV bytes, COST-MODEL.md §4) plus exposed communication (TP all-reduces of the attention and
tensor-parallel FFN outputs, EP dispatch/combine) plus kernel launch/latency floors and the
collectives' latency above them (``agentx.replay.collectives``), as the serving iteration
charges them. Formulas and the SEED claim each serves are in docs/metrics.md.

This module owns the closed forms themselves (fills, decode attention, decode experts, their
per-pass floors with the collectives); their shared vocabulary and building blocks live in
``agentx.replay.stage_parts``, re-exported here.
"""

from __future__ import annotations

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.collectives import collective_floors_s, ffn_all_reduce_bytes
from agentx.replay.config import layout

# The stages' vocabulary and building blocks (agentx.replay.stage_parts), re-exported.
from agentx.replay.stage_parts import (
    KERNELS_ATTENTION,
    KERNELS_DENSE_FFN,
    KERNELS_MOE,
    KEYS,
    STAGES,
    StageCost,
    _ep_bytes,
    _finish,
    _launch_floors_per_pass,
    _tp_bytes,
    distinct_experts,
    mla_mha_forms,
    moe_pass_s,
    pair_layers,
)

__all__ = [
    "KERNELS_ATTENTION",
    "KERNELS_DENSE_FFN",
    "KERNELS_MOE",
    "KEYS",
    "STAGES",
    "StageCost",
    "call_costs",
    "decode_attention_calls",
    "decode_attention_step",
    "decode_experts_step",
    "distinct_experts",
    "fill_cost",
    "mla_mha_forms",
    "moe_pass_s",
    "pair_layers",
]


def _floor_per_pass(cfg: ServingConfig) -> tuple[float, float]:
    """(attention, FFN/expert) floors of one forward pass, seconds: the launch floors plus the
    collectives' latency above them on each side (0 on one GPU)."""
    fa, ff = _launch_floors_per_pass(cfg)
    ca, cf = collective_floors_s(cfg)
    return fa + ca, ff + cf


def fill_cost(cfg: ServingConfig, new_tokens, prefix_tokens, batch_tokens=None) -> StageCost:
    """One input fill of ``new_tokens`` onto ``prefix_tokens`` cached tokens (SEED-8, SEED-9).

    Prefill when the prefix is 0, midfill otherwise. Without ``batch_tokens`` the fill runs
    alone in ceil(new / prefill_chunk_tokens) forward passes; with it, the fill shares passes
    of ``batch_tokens`` tokens with other fills and bears new/batch_tokens of each weight load.
    ``batch_tokens`` broadcasts like the other arguments (one pass size per fill).
    """
    lay, m = layout(cfg), cfg.model
    n = np.asarray(new_tokens, dtype=np.float64)
    p = np.asarray(prefix_tokens, dtype=np.float64)
    # A call's own passes (prefix KV read, latent up-projection) vs the weight loads it bears:
    # packed with other fills it pays new/batch_tokens of each pass's weights.
    if batch_tokens is None:
        own = np.ceil(n / float(cfg.prefill_chunk_tokens))
        passes = own
        per_pass = n / np.maximum(own, 1.0)
    else:
        per_pass = np.asarray(batch_tokens, dtype=np.float64)
        own = np.ceil(n / per_pass)
        passes = n / per_pass
    has = (n > 0).astype(np.float64)
    lin = n * (2.0 * (lay.attn_linear_params + lay.ffn_linear_params)) + has * (
        2.0 * lay.head_params
    )
    pairs = pair_layers(cfg, p + 1.0, n)
    att = pairs * m.attention_flops_per_pair()
    if m.attention == "mla":
        # Long appends run the non-absorbed (MHA) form, which first up-projects the cached
        # latent of every attended token; short ones the absorbed form. Take the cheaper.
        mha, up = mla_mha_forms(m)
        att = np.minimum(att, pairs * mha + (own * p + n) * (up * m.num_layers))
    # The LM head runs for each call's last token only: once per call alone, shared by the
    # calls of a packed pass.
    head = np.minimum(passes, has) * lay.head_weight_bytes
    wbytes = passes * (lay.attn_weight_bytes + lay.ffn_weight_bytes) + head
    if m.is_moe:
        per_rep = per_pass / lay.exp_replicas
        wbytes = wbytes + passes * (
            lay.exp_replicas * m.num_moe_layers * lay.expert_bytes
        ) * distinct_experts(cfg, per_rep)
    kv_r = lay.kv_rep * (
        own * m.kv_bytes(p, cfg.kv_precision)
        + np.maximum(own - 1.0, 0.0) * 0.5 * m.kv_bytes(n, cfg.kv_precision)
    )
    kv_w = n * (lay.kv_rep * cfg.kv_bytes_per_token)
    act = n * (lay.act_attn_token_bytes + lay.act_ffn_token_bytes)
    ep = _ep_bytes(cfg, n)
    # TP all-reduces (attention output every layer, FFN output where it is TP-sharded), then EP.
    su_t = _tp_bytes(cfg, lay, n) + ffn_all_reduce_bytes(cfg, n) + ep * lay.su_frac_ep
    so_t = ep * (1.0 - lay.su_frac_ep)
    su, so = su_t, so_t
    if cfg.pools == "disaggregated":
        # The new KV moves to the decode pool once, overlapped layer by layer (bytes, no time):
        # inside the scale-up domain when it spans both pools (NVL72), else over scale-out.
        xfer = n * cfg.kv_bytes_per_token
        if cfg.system.scale_up_domain_gpus >= 2 * cfg.gpus:
            su = su + xfer
        else:
            so = so + xfer
    fa, ff = _floor_per_pass(cfg)
    floors = passes * ((fa + ff) / lay.att_replicas)
    is_mid = p > 0
    eff = (
        np.where(is_mid, lay.eff.midfill.compute, lay.eff.prefill.compute),
        np.where(is_mid, lay.eff.midfill.memory, lay.eff.prefill.memory),
    )
    work = (lin, att, wbytes, kv_r, kv_w, act, su, so, su_t, so_t, floors)
    lin_s = None
    if m.is_moe and "moe_kernel" in cfg.extra:
        # The engine's grouped-GEMM kernel was measured at these shapes: its time per pass
        # replaces the routed experts' roofline math, as in serving.iteration.iteration_cost;
        # the weight-read bound in _finish still holds. FLOPs (and their energy) are unchanged.
        routed = n * (2.0 * m.active_routed_params)
        rate = lay.gpus * lay.lin_flops_per_s * eff[0]
        lin_s = (lin - routed) / rate + passes * moe_pass_s(cfg, per_pass)
    return _finish(cfg, lay, eff, *work, lin_s=lin_s)


def decode_attention_calls(
    cfg: ServingConfig, steps, start_context_tokens, batch_size=None
) -> StageCost:
    """Decode attention of ``steps`` steps starting at a context of ``start_context_tokens``,
    for one sequence in a decode batch of ``batch_size`` (default cfg.decode_batch) (SEED-10).

    Step j reads the KV of (start + j) tokens; the sequence bears 1/batch of each step's
    attention weight load and launch floors.
    """
    lay, m = layout(cfg), cfg.model
    b = np.asarray(cfg.decode_batch if batch_size is None else batch_size, dtype=np.float64)
    s = np.asarray(steps, dtype=np.float64)
    pairs = pair_layers(cfg, np.asarray(start_context_tokens, dtype=np.float64), s)
    att = pairs * m.attention_flops_per_pair()
    kv_r = pairs * (lay.kv_rep * m.kv_bytes_per_token_layer(cfg.kv_precision))
    kv_w = s * (lay.kv_rep * cfg.kv_bytes_per_token)
    lin = s * (2.0 * lay.attn_linear_params)
    wbytes = s * np.minimum(lay.att_replicas, b) * lay.attn_weight_bytes / b
    su = _tp_bytes(cfg, lay, s)
    floors = s * _floor_per_pass(cfg)[0] / b
    e = lay.eff.decode_attention
    act = s * lay.act_attn_token_bytes
    work = (lin, att, wbytes, kv_r, kv_w, act, su, 0.0, su, 0.0, floors)
    return _finish(cfg, lay, (e.compute, e.memory), *work)


def decode_attention_step(cfg: ServingConfig, batch_size, context_tokens_sum) -> StageCost:
    """One decode step of the instance: ``batch_size`` sequences holding ``context_tokens_sum``
    tokens together (exact for full attention; windows use the mean context)."""
    b = np.asarray(batch_size, dtype=np.float64)
    mean = np.asarray(context_tokens_sum, dtype=np.float64) / np.maximum(b, 1.0)
    return decode_attention_calls(cfg, 1.0, mean, np.maximum(b, 1.0)).scaled(b)


def decode_experts_step(cfg: ServingConfig, batch_size) -> StageCost:
    """One decode step's FFN side for ``batch_size`` tokens: dense FFN layers, shared and
    routed experts (distinct experts touched, SEED-11), router, LM head, the FFN-output
    all-reduce where the FFN is tensor-parallel, EP dispatch/combine."""
    lay, m = layout(cfg), cfg.model
    b = np.asarray(batch_size, dtype=np.float64)
    lin = b * (2.0 * (lay.ffn_linear_params + lay.head_params))
    wbytes = np.minimum(lay.att_replicas, b) * (lay.ffn_weight_bytes + lay.head_weight_bytes)
    if m.is_moe:
        per_rep = b / lay.exp_replicas
        wbytes = wbytes + (
            lay.exp_replicas * m.num_moe_layers * lay.expert_bytes
        ) * distinct_experts(cfg, per_rep)
    ep = _ep_bytes(cfg, b)
    su, so = ffn_all_reduce_bytes(cfg, b) + ep * lay.su_frac_ep, ep * (1.0 - lay.su_frac_ep)
    floors = _floor_per_pass(cfg)[1] * np.ones_like(b)
    e = lay.eff.decode_experts
    work = (lin, 0.0, wbytes, 0.0, 0.0, b * lay.act_ffn_token_bytes, su, so, su, so, floors)
    return _finish(cfg, lay, (e.compute, e.memory), *work)


def call_costs(cfg: ServingConfig, calls, kv=None):
    """Per-call frame: ``{stage}_{time_s,energy_j,flops,hbm_bytes,comm_bytes}`` for the four
    stages, then ttft_s, decode_latency_s and total_energy_j (docs/metrics.md)."""
    from agentx.replay.replay import call_frame  # per-call assembly lives with the replay

    return call_frame(cfg, calls, kv)
