"""Price one engine iteration: one forward pass over a mixed batch of decodes and prefill chunks.

This is the seam shared by the steady-state serving model (``agentx.serving.steady``) and the
time-stepped simulator (``agentx.dynamics``): an in-flight-batching engine (vLLM, SGLang,
TRT-LLM) runs iterations, each a forward pass over every running decode sequence (one token
each, or ``1 + draft`` under speculative verification) plus up to a token budget of prefill
chunks. Everything broadcasts over numpy arrays; there is no per-sequence loop.

Physics, per forward pass of the whole instance (COST-MODEL.md §3-4):

* Linear layers: ``2 · tokens · params`` FLOPs; weights are read once per pass by each
  attention replica that has work, routed experts once per distinct expert touched
  (SEED-11). Attention/dense weights and routed experts may have different formats
  (``ServingConfig.expert_precision``): each runs on its own datapath.
* Attention: decode token ``j`` of a sequence at context ``c`` attends to ``c + j`` tokens and
  reads their KV; a prefill chunk attends to its prefix and to itself (causal).
* Communication: TP all-reduce of the attention output per layer and of the FFN output where
  the FFN is tensor-parallel (dense layers, MoE with ``ep == 1``), EP dispatch/combine per MoE
  layer.
* Grouped-GEMM tile padding: each touched expert's rows are padded to the 64-row MMA tile,
  so short prompts (few tokens per expert) pay more math per token than long ones.
* Expert-parallel load imbalance: the busiest rank's share of the routed assignments (expected
  maximum of ``ep`` binomial counts) paces the expert GEMMs.
* Pipeline parallelism (``pp`` stages): the batch runs as ``min(pp, sequences)`` micro-batches
  (a sequence is never split), and a token crosses every stage in turn. A stage does 1/pp of the layers on
  ``gpus/pp`` GPUs, so the time a token waits between two of its iterations is
  ``pp × roofline(work of one micro-batch over all gpus)``. Weights are re-read by every
  micro-batch: adding stages never shortens an iteration at a fixed batch (the "bubble" cost
  is paid as repeated weight reads; tests/test_serving.py checks it).
* Measured kernels (``agentx.serving.kernels``, where the engine's kernel was measured): the
  routed experts of a prefill-sized pass take the measured MoE layer time, AMD's MLA decode
  at least its measured latency, and a W4A16 MoE kernel at decode sizes at least its measured
  layer time (it runs far below the weight-read roofline there); where the attention
  projections' block-scale GEMM was measured (``agentx.serving.gemm_kernels``, MI300X), its
  time replaces their roofline math.
* Kernel launch/latency floors are paid once per pass (a token crosses each layer once), and
  so is the latency of each layer's collectives above that floor (NCCL's latency model,
  ``agentx.replay.collectives``).

``iteration_time_s`` is the stable entry point (signature frozen: #10 and #13 import it).
"""

from __future__ import annotations

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.collectives import collective_floor_s, ffn_all_reduce_bytes
from agentx.replay.config import layout
from agentx.replay.stages import (
    _ep_bytes,
    _launch_floors_per_pass,
    _tp_bytes,
    distinct_experts,
    mla_mha_forms,
    pair_layers,
)
from agentx.serving.gemm_kernels import attn_gemm_layer_s
from agentx.serving.kernels import decode_floor_kernel, mla_decode_s, moe_decode_s, moe_layer_s

MMA_M = 64.0  # rows per tensor-core MMA issue (wgmma m64 / tcgen05 M=64)


def _a(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# The last configuration's layout and per-pass floors: a steady state prices ~24 passes of one
# configuration in a row, and these depend on the configuration alone (a frozen dataclass, so
# the object is the key; 20 % of a pass's Python time in calibrate)
_last: tuple = (None, None)


def _per_config(cfg: ServingConfig):
    global _last
    seen, got = _last
    if seen is not cfg:
        fa, ff = _launch_floors_per_pass(cfg)
        got = (layout(cfg), fa + ff + collective_floor_s(cfg))
        _last = (cfg, got)
    return got


def iteration_cost(
    cfg: ServingConfig,
    decode_seqs,
    decode_context_tokens,
    prefill_tokens=0.0,
    prefill_prefix_tokens=0.0,
    prefill_seqs=None,
    tokens_per_decode_seq=1.0,
) -> dict[str, np.ndarray]:
    """Work and latency of one iteration of the whole instance (arrays broadcast together).

    decode_seqs: running decode sequences; decode_context_tokens: their mean context (tokens
    already in KV); prefill_tokens: prefill-chunk tokens in this pass, from ``prefill_seqs``
    sequences (default: one sequence when there are any) whose cached prefix is
    ``prefill_prefix_tokens``; tokens_per_decode_seq: 1, or 1 + draft length when a
    speculative verify pass scores the drafted tokens.

    Returns ``time_s`` (wall time between two iterations as a sequence sees it), ``flops``,
    ``hbm_bytes``, ``comm_bytes`` (whole instance) and the roofline parts ``linear_s``,
    ``attention_s``, ``activation_s``, ``comm_s``, ``floor_s``.
    """
    (lay, floors_s), m = _per_config(cfg), cfg.model
    pp = float(cfg.pp)
    b, n = _a(decode_seqs), _a(prefill_tokens)
    c = _a(decode_context_tokens)
    q = _a(tokens_per_decode_seq)
    p0 = _a(prefill_prefix_tokens)
    ns = (n > 0).astype(np.float64) if prefill_seqs is None else _a(prefill_seqs)
    ns = np.minimum(ns, n)
    # pp micro-batches in flight, none smaller than one sequence (fewer leave stages idle).
    micro = np.clip(b + ns, 1.0, pp)
    b, n, ns = b / micro, n / micro, ns / micro
    dec_tok = b * q
    tok = dec_tok + n
    # Linear layers, attention side and FFN side on their own datapaths.
    attn_lin = 2.0 * tok * lay.attn_linear_params + 2.0 * (dec_tok + ns) * lay.head_params
    ffn_lin = 2.0 * tok * lay.ffn_linear_params
    if m.is_moe:
        # Grouped GEMMs pad each expert's rows to the tensor-core tile: Hopper's wgmma and
        # Blackwell's tcgen05.mma issue M = 64 rows at a time (PTX ISA, "wgmma.mma_async"
        # shapes m64nNk*), so an expert holding M tokens costs ceil(M/64)·64 rows of math.
        touched = lay.exp_replicas * distinct_experts(cfg, tok / lay.exp_replicas)
        rows = tok * m.experts_per_token / np.maximum(touched, 1e-12)
        pad = np.where(rows > 0, np.ceil(rows / MMA_M) * MMA_M / np.maximum(rows, 1e-12), 1.0)
        ffn_lin = ffn_lin + 2.0 * tok * m.active_routed_params * (pad - 1.0)
    if m.is_moe and cfg.ep > 1:
        # The busiest expert-parallel rank sets the pace of the grouped GEMMs. Under balanced
        # random routing each rank receives Binomial(tokens·k, 1/ep) assignments; the expected
        # maximum of ep such counts is about μ + σ·sqrt(2 ln ep) (Gumbel limit of Gaussian
        # order statistics). A lower bound: real routing is skewed (routing_skew).
        mu = np.maximum(tok * m.experts_per_token / cfg.ep, 1e-12)
        imb = 1.0 + np.sqrt(2.0 * np.log(cfg.ep) * (1.0 - 1.0 / cfg.ep) / mu)
        imb = np.minimum(imb, float(cfg.ep))
        ffn_lin = ffn_lin + 2.0 * tok * m.active_routed_params * (imb - 1.0)
    active = np.minimum(lay.att_replicas, b + ns)  # attention replicas with any work
    wbytes = active * (lay.attn_weight_bytes + lay.ffn_weight_bytes + lay.head_weight_bytes)
    if m.is_moe:
        wbytes = wbytes + lay.exp_replicas * m.num_moe_layers * lay.expert_bytes * (
            distinct_experts(cfg, tok / lay.exp_replicas)
        )
    # Attention: decode pairs (absorbed form) and prefill pairs (cheaper of the two MLA forms).
    dec_pairs = b * pair_layers(cfg, c, q)
    per_seq = np.where(ns > 0, n / np.maximum(ns, 1e-12), 0.0)
    pf_pairs = ns * pair_layers(cfg, p0 + 1.0, per_seq)
    att = (dec_pairs + pf_pairs) * m.attention_flops_per_pair()
    if m.attention == "mla":
        mha, up = mla_mha_forms(m)
        pf_abs = pf_pairs * m.attention_flops_per_pair()
        pf_mha = pf_pairs * mha + ns * (p0 + per_seq) * up * m.num_layers
        att = att - pf_abs + np.minimum(pf_abs, pf_mha)
    kvl = m.kv_bytes_per_token_layer(cfg.kv_precision)
    kv = lay.kv_rep * (
        (dec_pairs * kvl) + ns * m.kv_bytes(p0, cfg.kv_precision) + tok * cfg.kv_bytes_per_token
    )
    act = tok * (lay.act_attn_token_bytes + lay.act_ffn_token_bytes)
    ep = _ep_bytes(cfg, tok)
    # TP all-reduces: attention output every layer, FFN output where the FFN is TP-sharded.
    su = _tp_bytes(cfg, lay, tok) + ffn_all_reduce_bytes(cfg, tok) + ep * lay.su_frac_ep
    so = ep * (1.0 - lay.su_frac_ep)
    # Roofline over all GPUs of the instance; a token's latency crosses every pipeline stage.
    g, e, chip, sysm = lay.gpus, lay.eff, cfg.chip, cfg.system
    f_attn = g * chip.flops_per_s(cfg.compute_precision) * e.prefill.compute
    f_ffn = g * chip.flops_per_s(cfg.expert_compute_precision) * e.prefill.compute
    hbm_w = g * lay.hbm_bytes_per_s * e.decode_experts.memory
    hbm_kv = g * lay.hbm_bytes_per_s * e.decode_attention.memory
    attn_s = attn_lin / f_attn
    proj = cfg.extra.get("attn_gemm_kernel")
    if proj is not None:
        # The attention projections' GEMM was measured at this layout's shapes
        # (serving.gemm_kernels): its time per layer replaces their roofline math.
        rows = tok / lay.att_replicas
        proj_s = m.num_layers * attn_gemm_layer_s(proj, rows, e.kernel_floor_s) * (tok > 0)
        attn_s = proj_s + 2.0 * (dec_tok + ns) * lay.head_params / f_attn
    kernel = cfg.extra.get("moe_kernel") if m.is_moe else None
    if kernel is not None:
        # The engine's grouped-GEMM kernel was measured at these shapes (serving.kernels):
        # its time replaces the routed experts' roofline math (tile padding and rank imbalance
        # are in the measurement); the weight-read bound below still holds at decode sizes.
        routed_s = m.num_moe_layers * moe_layer_s(kernel, tok) * (tok > 0)
        other = 2.0 * tok * (lay.ffn_linear_params - m.active_routed_params)
        compute_s = attn_s + other / f_ffn + routed_s
    else:
        compute_s = attn_s + ffn_lin / f_ffn
    linear_s = np.maximum(compute_s, wbytes / hbm_w)
    dec = decode_floor_kernel(kernel)
    if dec is not None:
        # This kernel was measured slower than its weight read at decode sizes (kernels.py):
        # the routed experts take at least that, on top of the other weights' read.
        routed_b = (
            lay.exp_replicas
            * m.num_moe_layers
            * lay.expert_bytes
            * (distinct_experts(cfg, tok / lay.exp_replicas))
        )
        per_group = tok / lay.exp_replicas
        moe_s = m.num_moe_layers * moe_decode_s(dec, per_group, e.kernel_floor_s) * (tok > 0)
        linear_s = np.maximum(linear_s, (wbytes - routed_b) / hbm_w + moe_s)
    attention_s = np.maximum(att / (g * lay.att_flops_per_s * e.prefill.compute), kv / hbm_kv)
    mla = cfg.extra.get("mla_decode_latency")
    if mla is not None:
        # The decode-attention kernel cannot beat one sequence's measured latency (kernels.py).
        lat = mla_decode_s(mla, c + q, m.num_layers, e.kernel_floor_s) * (b > 0)
        attention_s = np.maximum(attention_s, lat)
    activation_s = act / hbm_kv
    comm_s = np.maximum(
        su / (g * sysm.scale_up_bytes_per_s * e.communication),
        so / (g * sysm.scale_out_bytes_per_s * e.communication),
    )
    floor_s = floors_s * (tok > 0)
    time_s = pp * (linear_s + attention_s + activation_s + comm_s) + floor_s
    return {
        "time_s": time_s,
        "flops": pp * (attn_lin + ffn_lin + att),
        "hbm_bytes": pp * (wbytes + kv + act),
        "comm_bytes": pp * (su + so),
        "linear_s": pp * linear_s,
        "attention_s": pp * attention_s,
        "activation_s": pp * activation_s,
        "comm_s": pp * comm_s,
        "floor_s": floor_s + 0.0 * time_s,
    }


def iteration_time_s(
    cfg: ServingConfig,
    decode_seqs,
    decode_context_tokens,
    prefill_tokens=0.0,
    prefill_prefix_tokens=0.0,
    prefill_seqs=None,
    tokens_per_decode_seq=1.0,
) -> np.ndarray:
    """Seconds of one engine iteration (see :func:`iteration_cost`); arrays broadcast."""
    return iteration_cost(
        cfg,
        decode_seqs,
        decode_context_tokens,
        prefill_tokens,
        prefill_prefix_tokens,
        prefill_seqs,
        tokens_per_decode_seq,
    )["time_s"]
