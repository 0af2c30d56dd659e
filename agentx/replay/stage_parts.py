"""The four stages' shared vocabulary and building blocks, for ``agentx.replay.stages``.

Owns the stage names and cost keys (``STAGES``, ``KEYS``, ``StageCost``), the launch-floor
kernel counts, and the pieces the closed forms are assembled from: attended pairs per layer
(``pair_layers``), distinct routed experts (``distinct_experts``), the roofline finish
(``_finish``: time, energy, the result), EP and TP bytes, launch floors, the MLA forms and the
measured MoE layer's seconds per pass (``moe_pass_s``). Numpy, broadcast; no per-call loop.
What reads the collectives (``collective_floors_s``, ``ffn_all_reduce_bytes``) stays in
``agentx.replay.stages``, where tests patch them.
"""

from __future__ import annotations

import numpy as np

from agentx.catalog.types import ServingConfig
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
