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
"""

from __future__ import annotations

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.collectives import collective_floors_s, ffn_all_reduce_bytes
from agentx.replay.config import Layout, layout
from agentx.replay.energy import energy_j

STAGES = ("prefill", "midfill", "decode_attention", "decode_experts")
# Small kernels per layer that each cost at least one launch/latency floor whatever their work
# (norms, rope, router/top-k, permute, collectives) [E, from the TRT-LLM/SGLang layer graph].
KERNELS_ATTENTION = 8
KERNELS_MOE = 8
KERNELS_DENSE_FFN = 3
KEYS = (
    "time_s",
    "flops",
    "hbm_bytes",
    "weight_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "activation_bytes",
    "comm_bytes",
    "scale_up_bytes",
    "scale_out_bytes",
    "energy_j",
)


class StageCost(dict):
    """Arrays keyed by ``KEYS``; also readable as attributes (``cost.time_s``)."""

    __getattr__ = dict.__getitem__

    def scaled(self, factor) -> StageCost:
        return StageCost({k: v * factor for k, v in self.items()})


def _sum_min(start, count, window):
    """Σ_{j<count} min(start + j, window), closed form (window may be inf)."""
    k = np.clip(window - start + 1.0, 0.0, count)
    return k * start + k * (k - 1.0) * 0.5 + (count - k) * window


def pair_layers(cfg: ServingConfig, start, count):
    """Σ over ``count`` query positions (contexts start, start+1, …) of attended tokens × layers.

    Sliding-window/chunked layers stop growing at their window (NOTES.md (a)). This is both
    the attention pair count (FLOPs) and, times bytes per token-layer, the KV read of decode.
    """
    m = cfg.model
    glob = count * start + count * (count - 1.0) * 0.5
    if not m.num_local_layers:
        return m.num_layers * glob
    return m.num_global_layers * glob + m.num_local_layers * _sum_min(
        start, count, float(m.local_window_tokens)
    )


def distinct_experts(cfg: ServingConfig, tokens):
    """Expected distinct routed experts per MoE layer touched by ``tokens`` tokens (SEED-11).

    Uniform routing: E·(1 − (1 − k/E)^T). With ``routing_skew`` s > 0 expert i is picked by a
    token with probability min(1, k·p_i), p_i ∝ i^−s (Zipf), and the sum runs over experts.
    """
    m = cfg.model
    e, k = m.n_routed_experts, m.experts_per_token
    t = np.asarray(tokens, dtype=np.float64)
    if e == 0:
        return np.zeros_like(t)
    if cfg.routing_skew <= 0:
        return e * -np.expm1(t * np.log1p(-k / e))
    p = np.arange(1, e + 1, dtype=np.float64) ** -cfg.routing_skew
    q = np.minimum(1.0, k * p / p.sum())
    uniq, inv = np.unique(t.ravel(), return_inverse=True)
    touched = (-np.expm1(np.outer(uniq, np.log1p(-np.minimum(q, 1 - 1e-12))))).sum(axis=1)
    return touched[inv].reshape(t.shape)


def _finish(
    cfg,
    lay: Layout,
    eff,
    lin,
    att,
    wbytes,
    kv_r,
    kv_w,
    act,
    su,
    so,
    su_t,
    so_t,
    floor_s,
    lin_s=None,
):
    """Roofline time, energy and the result dict from whole-instance work. ``lin_s``: the
    linear layers' compute seconds when not all of them are roofline math (measured MoE)."""
    g = lay.gpus
    mem = g * lay.hbm_bytes_per_s * eff[1]
    if lin_s is None:
        lin_s = lin / (g * lay.lin_flops_per_s * eff[0])
    t = np.maximum(lin_s, wbytes / mem)
    # Elementwise kernels have no math to hide their traffic behind: their bytes add time.
    t = t + np.maximum(att / (g * lay.att_flops_per_s * eff[0]), (kv_r + kv_w) / mem) + act / mem
    sysm, ce = cfg.system, lay.eff.communication
    t = (
        t
        + np.maximum(
            su_t / (g * sysm.scale_up_bytes_per_s * ce),
            so_t / (g * sysm.scale_out_bytes_per_s * ce),
        )
        + floor_s
    )
    hbm = wbytes + kv_r + kv_w + act
    return StageCost(
        time_s=t,
        flops=lin + att,
        hbm_bytes=hbm,
        weight_bytes=wbytes,
        kv_read_bytes=kv_r,
        kv_write_bytes=kv_w,
        activation_bytes=act,
        comm_bytes=su + so,
        scale_up_bytes=su,
        scale_out_bytes=so,
        energy_j=energy_j(cfg, t, lin, att, hbm, su, so),
    )


def _ep_bytes(cfg: ServingConfig, tokens):
    """Dispatch + combine bytes of ``tokens`` tokens over all MoE layers (COST-MODEL.md §3)."""
    m = cfg.model
    if not m.is_moe or cfg.ep <= 1:
        return 0.0
    per = 2.0 * m.experts_per_token * m.hidden_size * cfg.activation_bytes * (cfg.ep - 1) / cfg.ep
    return tokens * (m.num_moe_layers * per)


def _tp_bytes(cfg: ServingConfig, lay: Layout, tokens):
    """Ring all-reduce of the attention output on every layer of a tensor-parallel group."""
    if lay.att_tp <= 1:
        return 0.0
    return tokens * (
        2.0 * (lay.att_tp - 1) * cfg.model.hidden_size * cfg.activation_bytes * cfg.model.num_layers
    )


def _launch_floors_per_pass(cfg: ServingConfig) -> tuple[float, float]:
    """(attention, FFN/expert) launch floors of one forward pass, seconds."""
    m, f = cfg.model, layout(cfg).eff.kernel_floor_s
    ffn = (
        m.num_moe_layers * KERNELS_MOE + (m.num_layers - m.num_moe_layers) * KERNELS_DENSE_FFN
    ) * f
    return m.num_layers * KERNELS_ATTENTION * f, ffn


def _floor_per_pass(cfg: ServingConfig) -> tuple[float, float]:
    """(attention, FFN/expert) floors of one forward pass, seconds: the launch floors plus the
    collectives' latency above them on each side (0 on one GPU)."""
    fa, ff = _launch_floors_per_pass(cfg)
    ca, cf = collective_floors_s(cfg)
    return fa + ca, ff + cf


def mla_mha_forms(m) -> tuple[float, float]:
    """Non-absorbed MLA: (FLOPs per pair-layer, latent up-projection FLOPs per token-layer)."""
    h = m.num_attention_heads
    up = 2.0 * m.kv_lora_rank * h * (m.qk_head_dim - m.qk_rope_head_dim + m.v_head_dim)
    return 2.0 * h * (m.qk_head_dim + m.v_head_dim), up


def moe_pass_s(cfg: ServingConfig, pass_tokens):
    """Instance-seconds of the routed experts of one forward pass of ``pass_tokens`` tokens
    with the engine's measured MoE layer (``cfg.extra["moe_kernel"]``, agentx.serving.kernels).

    Each of the ``exp_replicas`` expert groups takes its share of the pass's tokens at once, and
    a pipeline stage holds 1/pp of the layers, so the instance is busy for
    ``moe_layers · layer_time(tokens / exp_replicas) / pp`` (the roofline divides the same way).
    """
    from agentx.serving.kernels import moe_layer_s

    lay, m = layout(cfg), cfg.model
    tokens = np.asarray(pass_tokens, dtype=np.float64)
    per_group = moe_layer_s(cfg.extra["moe_kernel"], tokens / lay.exp_replicas)
    return m.num_moe_layers * per_group / cfg.pp


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
