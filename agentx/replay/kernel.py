"""The per-call closed forms of ``agentx.replay.stages`` fused into one compiled pass.

Pricing whole trace columns with numpy allocates ~100 temporaries per call; this kernel reads
each call once and writes its columns, on all cores, at millions of calls per second
(benchmarks/bench_replay.py). It is the same arithmetic as ``fill_cost`` (packed into
``prefill_chunk_tokens`` passes, and alone for the latency; with an engine's measured MoE
layer where the configuration carries one), ``decode_attention_calls`` and
``decode_experts_step``; tests/test_stages.py checks the two agree to 1e-9. Stage totals are
summed per fixed block of calls, then over blocks in order, so results are deterministic
whatever the thread count. This module owns the compiled functions, all of them here (numba's
per-file cache cannot mix an old inlined helper into a new kernel); their constants per
configuration (``params``) are derived in ``agentx.replay.kernel_params``, re-exported; their
layout (``Params``) stays here, in the file numba checks the kernel's cache against.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

# The constants per configuration (agentx.replay.kernel_params), re-exported.
from agentx.replay.kernel_params import params
from agentx.replay.stages import KEYS

__all__ = [
    "BLOCKS",
    "N_KEYS",
    "N_ROWS",
    "PARALLEL_FROM_CALLS",
    "TILE",
    "Params",
    "kernel_for",
    "params",
    "price",
]

BLOCKS = 256
TILE = 256  # calls per tile: 23 rows × 256 × 8 B = 47 KB, inside L2
# Output rows: for each stage (prefill, midfill, decode_attention, decode_experts) the CALL_KEYS
# time_s, energy_j, flops, hbm_bytes, comm_bytes; then ttft_s, decode_latency_s, total_energy_j.
N_ROWS = 23
N_KEYS = len(KEYS)
K_TIME, K_FLOPS, K_HBM, K_COMM, K_ENERGY = (
    KEYS.index(k) for k in ("time_s", "flops", "hbm_bytes", "comm_bytes", "energy_j")
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


@numba.njit(cache=True, inline="always", error_model="numpy")
def _pairs(q, start, count):
    glob = count * start + count * (count - 1.0) * 0.5
    if q.n_local == 0.0:
        return q.n_layers * glob
    k = min(max(q.window - start + 1.0, 0.0), count)
    return q.n_global * glob + q.n_local * (
        k * start + k * (k - 1.0) * 0.5 + (count - k) * q.window
    )


@numba.njit(cache=True, inline="always", error_model="numpy")
def _kvb(q, tokens):
    if q.n_local == 0.0:
        return q.kv_layer_b * q.n_layers * tokens
    return q.kv_layer_b * (q.n_global * tokens + q.n_local * min(tokens, q.window))


@numba.njit(cache=True, inline="always", error_model="numpy")
def _fill(q, dtab, n, p):
    """(time packed, time alone, lin, att, weights packed, kv_r, kv_w, act, su_t, so_t) of one
    fill: packed into passes of ``chunk`` tokens, and alone (the latency) in its own passes."""
    has = 1.0 if n > 0 else 0.0
    own = np.ceil(n / q.chunk)
    passes = n / q.chunk
    t = n / max(own, 1.0)
    last = int(q.chunk)  # dtab[0..last]: distinct experts; then the MoE kernel's seconds
    j = min(int(t), last - 1)
    d_alone = dtab[j] + (t - j) * (dtab[j + 1] - dtab[j])
    lin = n * q.lin_token + has * q.head_flops
    pairs = _pairs(q, p + 1.0, n)
    att = pairs * q.att_pair
    if q.mla != 0.0:
        att = min(att, pairs * q.mha_pair + (own * p + n) * (q.up_token_layer * q.n_layers))
    w = passes * (q.fill_weights + q.expert_w * q.d_chunk) + min(passes, has) * q.head_w
    w_alone = own * (q.fill_weights + q.expert_w * d_alone) + has * q.head_w
    kv_r = q.kv_rep * (own * _kvb(q, p) + max(own - 1.0, 0.0) * 0.5 * _kvb(q, n))
    kv_w = n * q.kv_rep * q.kv_token_b
    act = n * q.act_fill
    ep = n * q.ep_token
    su_t = n * q.tp_token + n * q.ffn_ar_token + ep * q.su_frac
    so_t = ep * (1.0 - q.su_frac)
    mid = p > 0
    im = q.imem_mid if mid else q.imem_pre
    # Measured MoE layer (zeros without one: then exactly lin · il): the routed FLOPs leave the
    # roofline and the layer's seconds per pass come in, packed (chunk tokens) and alone (t).
    k = last + 1 + j
    base = (lin - n * q.routed_token_flops) * (q.ilin_mid if mid else q.ilin_pre)
    tl = base + passes * q.moe_chunk_s
    tl_alone = base + own * (dtab[k] + (t - j) * (dtab[k + 1] - dtab[k]))
    rest = max(att * (q.iatt_mid if mid else q.iatt_pre), (kv_r + kv_w) * im) + act * im
    rest += max(su_t * q.isu, so_t * q.iso)
    t = max(tl, w * im) + rest + passes * q.floor_pass
    t_alone = max(tl_alone, w_alone * im) + rest + own * q.floor_pass
    return t, t_alone, lin, att, w, kv_r, kv_w, act, su_t, so_t


@numba.njit(cache=True, inline="always", error_model="numpy")
def _decode_att(q, steps, start, w_tok):
    """(time, lin, att, weights, kv_r, kv_w, act, su) of ``steps`` decode steps from ``start``,
    bearing ``w_tok`` attention-weight bytes per step (the replicas' read / sequences)."""
    pairs = _pairs(q, start, steps)
    att = pairs * q.att_pair
    kv_r = pairs * q.kv_rep * q.kv_layer_b
    kv_w = steps * q.kv_rep * q.kv_token_b
    lin = steps * q.att_lin_token
    w = steps * w_tok
    act = steps * q.act_att
    su = steps * q.tp_token
    im = q.imem_da
    t = max(lin * q.ilin_da, w * im) + max(att * q.iatt_da, (kv_r + kv_w) * im)
    t += act * im + su * q.isu + steps * q.floor_att_tok
    return t, lin, att, w, kv_r, kv_w, act, su


@numba.njit(cache=True, inline="always", error_model="numpy")
def _one(q, dtab, exp_tok, n, p, m, xt, xe, buf, j, acc):
    """Price one call into column ``j`` of ``buf`` and add its stage totals to ``acc``."""
    t, t_alone, lin, att, w, kv_r, kv_w, act, su_t, so_t = _fill(q, dtab, n, p)
    su = su_t + n * q.kv_token_b * q.xfer_su
    so = so_t + n * q.kv_token_b * q.xfer_so
    hbm = w + kv_r + kv_w + act
    e = q.static * t + q.e_lin * lin + q.e_att * att + q.e_hbm * hbm + q.e_su * su + q.e_so * so
    t_alone += xt
    t += xt
    e += xe
    s = 1 if p > 0 else 0
    vals = (t, lin + att, hbm, w, kv_r, kv_w, act, su + so, su, so, e)
    for k in range(N_KEYS):
        acc[s, k] += vals[k]
    for r in range(2):
        on = 1.0 if r == s else 0.0
        buf[5 * r, j] = t * on
        buf[5 * r + 1, j] = e * on
        buf[5 * r + 2, j] = (lin + att) * on
        buf[5 * r + 3, j] = hbm * on
        buf[5 * r + 4, j] = (su + so) * on
    ctx = n + p
    ta, lin, att, w, kv_r, kv_w, act, su = _decode_att(q, m, ctx, q.att_w_tok)
    hbm = w + kv_r + kv_w + act
    ea = q.static * ta + q.e_lin * lin + q.e_att * att + q.e_hbm * hbm + q.e_su * su
    vals = (ta, lin + att, hbm, w, kv_r, kv_w, act, su, su, 0.0, ea)
    for k in range(N_KEYS):
        acc[2, k] += vals[k]
        acc[3, k] += m * exp_tok[k]
    buf[10, j], buf[11, j], buf[12, j], buf[13, j], buf[14, j] = ta, ea, lin + att, hbm, su
    for r, k in ((15, K_TIME), (16, K_ENERGY), (17, K_FLOPS), (18, K_HBM), (19, K_COMM)):
        buf[r, j] = m * exp_tok[k]
    one = _decode_att(q, 1.0, ctx + max(m - 1.0, 0.0) * 0.5, q.att_w_micro)[0]
    att_micro = (one - q.floor_att_tok) * q.micro_batch
    # The fill's chunks stream through the pp stages: (chunks + pp - 1) stage times.
    k = max(np.ceil(n / q.chunk), 1.0)
    buf[20, j] = t_alone * q.att_replicas * (k + q.pp - 1.0) / k
    buf[21, j] = m * (q.pp * (att_micro + q.exp_step_micro) + q.floors_step)
    buf[22, j] = e + ea + m * exp_tok[K_ENERGY]


def _price(q, dtab, exp_tok, new, prefix, output, xfer_t, xfer_e, cols, keep):  # pragma: no cover
    n_calls = new.size
    sums = np.zeros((BLOCKS, 4, N_KEYS))
    has_kv = xfer_t.size == n_calls
    for blk in numba.prange(BLOCKS):
        lo, hi = blk * n_calls // BLOCKS, (blk + 1) * n_calls // BLOCKS
        # Columns are built in cache-sized tiles and copied out row by row: writing 23 output
        # streams one call at a time defeats the prefetchers (5x slower, benchmarks/).
        buf = np.empty((N_ROWS, TILE))
        for t0 in range(lo, hi, TILE):
            t1 = min(t0 + TILE, hi)
            for i in range(t0, t1):
                xt = xfer_t[i] if has_kv else 0.0
                xe = xfer_e[i] if has_kv else 0.0
                _one(q, dtab, exp_tok, new[i], prefix[i], output[i], xt, xe, buf, i - t0, sums[blk])
            for a in range(keep.size):  # a loop, not a slice assignment: compiles 1.5 s faster
                r = keep[a]
                for i in range(t0, t1):
                    cols[a, i] = buf[r, i - t0]
    return sums


_price_serial = numba.njit(cache=True, error_model="numpy")(_price)
_price_parallel = numba.njit(cache=True, parallel=True, error_model="numpy")(_price)
PARALLEL_FROM_CALLS = 200_000  # below this, thread start-up and barriers cost more than they save


def kernel_for(calls: int, parallel: bool = True):
    """The compiled pricing kernel a partition of ``calls`` rows runs on. ``parallel=False``
    where another thread needs the second core: a replay writing calls.parquet, whose writer
    thread is about as busy as the pricing (10 M-call replays alternating the two were faster
    with the serial kernel, 7 of 7 by 0.1-0.3 s, and again in five after round 11,
    docs/metrics.md)."""
    return _price_parallel if parallel and calls >= PARALLEL_FROM_CALLS else _price_serial


def price(q, dtab, exp_tok, new, prefix, output, xfer_t, xfer_e, keep=None, parallel=True,
          into=None):  # fmt: skip
    """(columns (rows ``keep`` of the N_ROWS, default all, × calls), per-block stage sums
    (BLOCKS × 4 × len(KEYS)), which cover every row whatever ``keep``); ``parallel``: as in
    ``kernel_for`` (the numbers are the same either way); ``into``: a C-contiguous float64
    array of the columns' shape to write them to (every value is written), else a new one."""
    fn = kernel_for(new.size, parallel)
    keep = np.arange(N_ROWS) if keep is None else np.asarray(keep, np.int64)
    shape = (keep.size, new.size)
    if into is None:
        cols = np.empty(shape)
    elif into.shape != shape or into.dtype != np.float64 or not into.flags.c_contiguous:
        raise ValueError(f"into: a C-contiguous float64 array of shape {shape} is needed")
    else:
        cols = into
    return cols, fn(q, dtab, exp_tok, new, prefix, output, xfer_t, xfer_e, cols, keep)
