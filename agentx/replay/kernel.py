"""The per-call closed forms of ``agentx.replay.stages`` fused into one compiled pass.

Pricing whole trace columns with numpy allocates ~100 temporaries per call; this kernel reads
each call once and writes its columns, on all cores, at millions of calls per second
(benchmarks/bench_replay.py). It is the same arithmetic as ``fill_cost`` (packed into
``prefill_chunk_tokens`` passes, and alone for the latency; with an engine's measured MoE
layer where the configuration carries one), ``decode_attention_calls`` and
``decode_experts_step``; tests/test_stages.py checks the two agree to 1e-9. Stage totals are
summed per fixed block of calls, then over blocks in order, so results are deterministic
whatever the thread count. Each tile of calls is priced in three loops: the measured tables'
values per call (a table read per call is a gather, which LLVM leaves scalar), the closed
forms of every call (on vectors), and the stage sums, call after call (the same sums to the
bit as one loop doing it all, which ran on scalars: the serial kernel prices 2^19 calls in
22 ms against that loop's 37, median of 32, quiet Intel Xeon). This module owns the compiled
functions, all of them here (numba's per-file cache cannot mix an old inlined helper into a
new kernel); their constants per configuration (``params``) are derived in
``agentx.replay.kernel_params``, re-exported; their layout (``Params``) stays here, in the
file numba checks the kernel's cache against.
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
TILE = 64  # calls per tile: a buffer of BUF_ROWS (36) rows × 64 × 8 B = 18 KB, inside L1
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
def _alone(q, dtab, n):
    """What the measured tables give a fill of ``n`` tokens alone in its own passes: the
    distinct experts one of its passes touches, and the MoE kernel's seconds for the pass
    (interpolated in ``dtab``). Read in a loop of its own: a table read per call (a gather)
    keeps the loop it is in from running on vectors."""
    own = np.ceil(n / q.chunk)
    t = n / max(own, 1.0)
    last = int(q.chunk)  # dtab[0..last]: distinct experts; then the MoE kernel's seconds
    j = min(int(t), last - 1)
    k = last + 1 + j
    return dtab[j] + (t - j) * (dtab[j + 1] - dtab[j]), dtab[k] + (t - j) * (dtab[k + 1] - dtab[k])


@numba.njit(cache=True, inline="always", error_model="numpy")
def _fill(q, d_alone, moe_alone, n, p):
    """(time packed, time alone, lin, att, weights packed, kv_r, kv_w, act, su_t, so_t) of one
    fill: packed into passes of ``chunk`` tokens, and alone (the latency) in its own passes;
    ``d_alone``, ``moe_alone``: ``_alone(q, dtab, n)``."""
    has = 1.0 if n > 0 else 0.0
    own = np.ceil(n / q.chunk)
    passes = n / q.chunk
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
    base = (lin - n * q.routed_token_flops) * (q.ilin_mid if mid else q.ilin_pre)
    tl = base + passes * q.moe_chunk_s
    tl_alone = base + own * moe_alone
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
def _one(q, e_time, e_energy, e_flops, e_hbm, e_comm, d_alone, moe_alone, n, p, m, xt, xe):
    """One call's buffer rows (``R_*``): its N_ROWS columns, then the values the stage sums
    add that no column holds. Scalars in, a tuple out: an array handed to an inlined
    function is reference-counted there, a call the loop could not run on vectors around."""
    t, t_alone, lin, att, w, kv_r, kv_w, act, su_t, so_t = _fill(q, d_alone, moe_alone, n, p)
    su = su_t + n * q.kv_token_b * q.xfer_su
    so = so_t + n * q.kv_token_b * q.xfer_so
    hbm = w + kv_r + kv_w + act
    e = q.static * t + q.e_lin * lin + q.e_att * att + q.e_hbm * hbm + q.e_su * su + q.e_so * so
    t_alone += xt
    t += xt
    e += xe
    on = 1.0 if p > 0 else 0.0  # a midfill (stage 1), else a prefill (stage 0)
    pre = 1.0 - on
    ctx = n + p
    ta, lin_d, att_d, w_d, kv_r_d, kv_w_d, act_d, su_d = _decode_att(q, m, ctx, q.att_w_tok)
    hbm_d = w_d + kv_r_d + kv_w_d + act_d
    ea = q.static * ta + q.e_lin * lin_d + q.e_att * att_d + q.e_hbm * hbm_d + q.e_su * su_d
    one = _decode_att(q, 1.0, ctx + max(m - 1.0, 0.0) * 0.5, q.att_w_micro)[0]
    att_micro = (one - q.floor_att_tok) * q.micro_batch
    # The fill's chunks stream through the pp stages: (chunks + pp - 1) stage times.
    k = max(np.ceil(n / q.chunk), 1.0)
    ttft = t_alone * q.att_replicas * (k + q.pp - 1.0) / k
    decode = m * (q.pp * (att_micro + q.exp_step_micro) + q.floors_step)
    return (
        t * pre, e * pre, (lin + att) * pre, hbm * pre, (su + so) * pre,
        t * on, e * on, (lin + att) * on, hbm * on, (su + so) * on,
        ta, ea, lin_d + att_d, hbm_d, su_d,
        m * e_time, m * e_energy, m * e_flops, m * e_hbm, m * e_comm,
        ttft, decode, e + ea + m * e_energy,
        w, kv_r, kv_w, act, su, so, w_d, kv_r_d, kv_w_d, act_d, on,
    )  # fmt: skip


# A tile's buffer is flat, row r of the tile's call j at r * TILE + j: a stride the compiler
# knows, so it can tell the rows apart and run the loop over a tile's calls on vectors (with
# a 2-D buffer it would have to check every row against every input at run time, and gives
# up). Rows: the N_ROWS columns, then (``_one``) the fill's weights, KV read and write,
# activation, scale-up and scale-out bytes, the decode attention's weights, KV read and
# write and activation bytes, 1.0 for a midfill; then (``_alone``) the table values.
R_FILL = N_ROWS
R_DECODE = R_FILL + 6
R_MID = R_DECODE + 4
R_ALONE = R_MID + 1
BUF_ROWS = R_ALONE + 2


@numba.njit(cache=True, inline="always", error_model="numpy")
def _add(buf, output, exp_tok, t0, t1, acc):
    """The stage totals of the tile's calls ``t0:t1`` added to ``acc``: each total adds the
    calls one after the other, as one loop over the calls adding into ``acc`` would, so the
    sums are the same to the bit whatever the tile. The totals are locals in the loop (kept
    in registers; ``acc`` itself would be read and written back for every call)."""
    T = TILE
    p0, p1, p2, p3, p4, p5 = acc[0, 0], acc[0, 1], acc[0, 2], acc[0, 3], acc[0, 4], acc[0, 5]
    p6, p7, p8, p9, p10 = acc[0, 6], acc[0, 7], acc[0, 8], acc[0, 9], acc[0, 10]
    m0, m1, m2, m3, m4, m5 = acc[1, 0], acc[1, 1], acc[1, 2], acc[1, 3], acc[1, 4], acc[1, 5]
    m6, m7, m8, m9, m10 = acc[1, 6], acc[1, 7], acc[1, 8], acc[1, 9], acc[1, 10]
    d0, d1, d2, d3, d4, d5 = acc[2, 0], acc[2, 1], acc[2, 2], acc[2, 3], acc[2, 4], acc[2, 5]
    d6, d7, d10 = acc[2, 6], acc[2, 7], acc[2, 10]  # d8 = d7 (same values); d9 adds 0.0
    x0, x1, x2, x3, x4, x5 = acc[3, 0], acc[3, 1], acc[3, 2], acc[3, 3], acc[3, 4], acc[3, 5]
    x6, x7, x8, x9, x10 = acc[3, 6], acc[3, 7], acc[3, 8], acc[3, 9], acc[3, 10]
    e0, e1, e2, e3, e4, e5 = exp_tok[0], exp_tok[1], exp_tok[2], exp_tok[3], exp_tok[4], exp_tok[5]
    e6, e7, e8, e9, e10 = exp_tok[6], exp_tok[7], exp_tok[8], exp_tok[9], exp_tok[10]
    for i in range(t0, t1):
        j = i - t0
        # KEYS: time, FLOPs, HBM, weights, KV read, KV write, activations, comm, scale-up,
        # scale-out bytes, energy; a fill's time, energy, FLOPs, HBM and comm bytes are
        # its stage's five columns
        mid = buf[R_MID * T + j] > 0.0
        c = (5 * T if mid else 0) + j
        f = R_FILL * T + j
        v0, v1, v2, v7, v10 = buf[c], buf[c + 2 * T], buf[c + 3 * T], buf[c + 4 * T], buf[c + T]
        v3, v4, v5, v6 = buf[f], buf[f + T], buf[f + 2 * T], buf[f + 3 * T]
        v8, v9 = buf[f + 4 * T], buf[f + 5 * T]
        if mid:
            m0, m1, m2, m3, m4, m5 = m0 + v0, m1 + v1, m2 + v2, m3 + v3, m4 + v4, m5 + v5
            m6, m7, m8, m9, m10 = m6 + v6, m7 + v7, m8 + v8, m9 + v9, m10 + v10
        else:
            p0, p1, p2, p3, p4, p5 = p0 + v0, p1 + v1, p2 + v2, p3 + v3, p4 + v4, p5 + v5
            p6, p7, p8, p9, p10 = p6 + v6, p7 + v7, p8 + v8, p9 + v9, p10 + v10
        g = R_DECODE * T + j
        d0, d1, d2, d7 = d0 + buf[10 * T + j], d1 + buf[12 * T + j], d2 + buf[13 * T + j], d7 + buf[14 * T + j]  # fmt: skip
        d3, d4, d5, d6 = d3 + buf[g], d4 + buf[g + T], d5 + buf[g + 2 * T], d6 + buf[g + 3 * T]
        d10 += buf[11 * T + j]
        m = output[i]
        x0, x1, x2, x3, x4, x5 = x0 + m * e0, x1 + m * e1, x2 + m * e2, x3 + m * e3, x4 + m * e4, x5 + m * e5  # fmt: skip
        x6, x7, x8, x9, x10 = x6 + m * e6, x7 + m * e7, x8 + m * e8, x9 + m * e9, x10 + m * e10
    acc[0, 0], acc[0, 1], acc[0, 2], acc[0, 3], acc[0, 4], acc[0, 5] = p0, p1, p2, p3, p4, p5
    acc[0, 6], acc[0, 7], acc[0, 8], acc[0, 9], acc[0, 10] = p6, p7, p8, p9, p10
    acc[1, 0], acc[1, 1], acc[1, 2], acc[1, 3], acc[1, 4], acc[1, 5] = m0, m1, m2, m3, m4, m5
    acc[1, 6], acc[1, 7], acc[1, 8], acc[1, 9], acc[1, 10] = m6, m7, m8, m9, m10
    acc[2, 0], acc[2, 1], acc[2, 2], acc[2, 3], acc[2, 4], acc[2, 5] = d0, d1, d2, d3, d4, d5
    acc[2, 6], acc[2, 7], acc[2, 8], acc[2, 10] = d6, d7, d7, d10
    acc[3, 0], acc[3, 1], acc[3, 2], acc[3, 3], acc[3, 4], acc[3, 5] = x0, x1, x2, x3, x4, x5
    acc[3, 6], acc[3, 7], acc[3, 8], acc[3, 9], acc[3, 10] = x6, x7, x8, x9, x10


@numba.njit(cache=True, inline="always", error_model="numpy")
def _put(buf, j, v):
    """``_one``'s tuple into the tile's column ``j`` (row r at r * TILE + j)."""
    T = TILE
    buf[j], buf[T + j], buf[2 * T + j], buf[3 * T + j] = v[0], v[1], v[2], v[3]
    buf[4 * T + j] = v[4]
    buf[5 * T + j], buf[6 * T + j], buf[7 * T + j], buf[8 * T + j] = v[5], v[6], v[7], v[8]
    buf[9 * T + j], buf[10 * T + j], buf[11 * T + j], buf[12 * T + j] = v[9], v[10], v[11], v[12]
    buf[13 * T + j], buf[14 * T + j], buf[15 * T + j], buf[16 * T + j] = v[13], v[14], v[15], v[16]
    buf[17 * T + j], buf[18 * T + j], buf[19 * T + j], buf[20 * T + j] = v[17], v[18], v[19], v[20]
    buf[21 * T + j], buf[22 * T + j], buf[23 * T + j], buf[24 * T + j] = v[21], v[22], v[23], v[24]
    buf[25 * T + j], buf[26 * T + j], buf[27 * T + j], buf[28 * T + j] = v[25], v[26], v[27], v[28]
    buf[29 * T + j], buf[30 * T + j], buf[31 * T + j], buf[32 * T + j] = v[29], v[30], v[31], v[32]
    buf[33 * T + j] = v[33]


def _price(q, dtab, exp_tok, new, prefix, output, xfer_t, xfer_e, cols, keep):  # pragma: no cover
    n_calls = new.size
    sums = np.zeros((BLOCKS, 4, N_KEYS))
    has_kv = xfer_t.size == n_calls
    e_time, e_energy, e_flops = exp_tok[K_TIME], exp_tok[K_ENERGY], exp_tok[K_FLOPS]
    e_hbm, e_comm = exp_tok[K_HBM], exp_tok[K_COMM]
    T = TILE
    for blk in numba.prange(BLOCKS):
        lo, hi = blk * n_calls // BLOCKS, (blk + 1) * n_calls // BLOCKS
        # Columns are built in cache-sized tiles and copied out row by row: writing 23 output
        # streams one call at a time defeats the prefetchers (5x slower, benchmarks/).
        buf = np.empty(BUF_ROWS * T)
        for t0 in range(lo, hi, T):
            t1 = min(t0 + T, hi)
            for i in range(t0, t1):
                buf[R_ALONE * T + i - t0], buf[(R_ALONE + 1) * T + i - t0] = _alone(q, dtab, new[i])
            # on vectors: no table read, no sum added, and a loop per case (a reload read
            # only where there is one)
            if has_kv:
                for i in range(t0, t1):
                    j = i - t0
                    v = _one(q, e_time, e_energy, e_flops, e_hbm, e_comm, buf[R_ALONE * T + j],
                             buf[(R_ALONE + 1) * T + j], new[i], prefix[i], output[i],
                             xfer_t[i], xfer_e[i])  # fmt: skip
                    _put(buf, j, v)
            else:
                for i in range(t0, t1):
                    j = i - t0
                    v = _one(q, e_time, e_energy, e_flops, e_hbm, e_comm, buf[R_ALONE * T + j],
                             buf[(R_ALONE + 1) * T + j], new[i], prefix[i], output[i], 0.0, 0.0)  # fmt: skip
                    _put(buf, j, v)
            _add(buf, output, exp_tok, t0, t1, sums[blk])
            for a in range(keep.size):  # a loop, not a slice assignment: compiles 1.5 s faster
                r = keep[a]
                for i in range(t0, t1):
                    cols[a, i] = buf[r * T + i - t0]
    return sums


# the serial kernel runs beside the calls.parquet writer thread, which needs the GIL at each
# row group's start and end: held through a partition's pricing (~50 ms), it kept the writer
# (the pricing loop's floor) waiting
_price_serial = numba.njit(cache=True, error_model="numpy", nogil=True)(_price)
_price_parallel = numba.njit(cache=True, parallel=True, error_model="numpy")(_price)
PARALLEL_FROM_CALLS = 200_000  # below this, thread start-up and barriers cost more than they save


def kernel_for(calls: int, parallel: bool = True):
    """The compiled pricing kernel a partition of ``calls`` rows runs on. ``parallel=False``
    where another thread needs the second core: a replay writing calls.parquet, whose writer
    thread is the pricing loop's floor (10 M-call replays alternating the two were faster
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
