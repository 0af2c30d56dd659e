"""The time-stepped serving simulator as one numba kernel (the only sequential loop).

Each iteration is one decode step of the decode pool (or, when decode is idle, the time to
the next event: a fill completing, a KV transfer landing, an arrival, a control tick). Calls
move arrival → admission queue → fill queue → [KV transfer] → ready buffer → decode batch →
done. Stop times are only discovered when a sequence emits its last token: admission looks at
current contexts only, never at ``out_tok``. See ``engine.py`` for the Python side.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from agentx.dynamics import admission as A
from agentx.dynamics import kernel_parts as KP

N_TS = KP.N_TS
# Parameter vector layout (numba freezes these module globals at compile time).
P_MODE, P_MAX_BATCH, P_CHUNK, P_MAX_WAIT, P_SAMPLE, P_KV_BPT, P_LINK_J_PER_B, P_HORIZON = range(8)
P_LINK_LAT_S, P_OPT0, P_RESIZE = range(8, 11)
N_P = 11
# Columns of the layout table: one row per fill/decode split the minute controller may pick.
O_GPUS_FILL, O_GPUS_DEC, O_KV_CAP, O_LINK_BPS, O_IDLE_FILL_W, O_IDLE_DEC_W = range(6)
N_O = 6
DONE, DROPPED, UNARRIVED = 1, 2, 0
R_NONE, R_TIMEOUT, R_TOO_LONG, R_KV_EXHAUSTED, R_HORIZON = 0, 1, 2, 3, 4


@njit(cache=True)
def simulate_kernel(calls, tables, p, q):
    """Run the whole simulation; ``calls`` and ``tables`` are the tuples built by engine.py."""
    t_start, think, new_tok, prefix_tok, out_tok, next_call, first_calls, fill_work, fill_energy = (
        calls
    )
    dec_t, dec_e, ctx_grid, pre_t, pre_e, fill_grid, opt = tables
    n = t_start.shape[0]
    mode_agg = p[P_MODE] == 1.0
    max_batch = int(p[P_MAX_BATCH])
    o = int(p[P_OPT0])  # current layout (row of ``opt``)
    gpus_f, gpus_d, kv_cap, link_bps, idle_f, idle_d = opt[o]
    sample_s = p[P_SAMPLE]
    arrival = np.full(n, np.nan)
    admitted = np.full(n, np.nan)
    first = np.full(n, np.nan)
    done = np.full(n, np.nan)
    status = np.zeros(n, np.int8)
    reason = np.zeros(n, np.int8)
    preempt = np.zeros(n, np.int32)
    kv_moved = np.zeros(n)
    rem_work = np.zeros(n)
    rem_tok = np.zeros(n)
    e_rate = np.zeros(n)
    ctx = np.zeros(n)
    gen = np.zeros(n, np.int64)
    seq = np.zeros(n, np.int64)
    cap = n + 1
    wq = np.empty(cap, np.int64)
    fq = np.empty(cap, np.int64)
    xq = np.empty(cap, np.int64)
    rq = np.empty(cap, np.int64)
    wh = wt = fh = ft = xh = xt = rh = rt = 0
    xend = np.zeros(n)
    fill_end = np.zeros(n)
    batch = np.empty(max_batch + 1, np.int64)
    nb = 0
    kv_used = 0.0
    hk = np.empty(first_calls.shape[0] + 1)
    hv = np.empty(first_calls.shape[0] + 1, np.int64)
    hs = 0
    for i in first_calls:
        hs = KP.heap_push(hk, hv, hs, t_start[i], i)
    t = hk[0] if hs > 0 else 0.0
    t0 = t
    ts = np.zeros((1024, N_TS))
    nts = 0
    acc = np.zeros(2)  # energy and busy GPU-seconds of the open sample interval
    snap = np.zeros(8)
    gpus_all = gpus_d + gpus_f
    busy_f_min = 0.0
    busy_d_min = 0.0
    n_resize = 0
    ctrl = np.zeros(4)  # rate, integral, ewma arrivals, ewma uptake
    ctrl[0] = q[1] / max(q[2], 1e-9)
    bucket = q[7]
    next_sec = t0 + 1.0
    next_min = t0 + 60.0
    arr_sec = 0.0
    up_sec = 0.0
    cap_b = max_batch
    ctx_mean_seen = 1.0
    link_free = t0
    cnt = np.zeros(2, np.int64)  # calls in the system, calls resolved (done or dropped)
    out, ses, heap = (status, reason, done), (next_call, t_start, think), (hk, hv)
    seqc = 0
    n_steps = 0
    n_iter = 0
    busy_dec_s = 0.0
    busy_fill_s = 0.0
    while cnt[1] < n and t < p[P_HORIZON]:
        n_iter += 1
        # arrivals whose time has come
        while hs > 0 and hk[0] <= t:
            i = hv[0]
            arrival[i] = hk[0]
            hs = KP.heap_pop(hk, hv, hs)
            cnt[0] += 1
            arr_sec += 1.0
            if prefix_tok[i] + new_tok[i] + 1 > kv_cap:
                hs = KP.end_call(i, t, DROPPED, R_TOO_LONG, out, cnt, ses, heap, hs)
            else:
                wq[wt % cap] = i
                wt += 1
        while xt > xh and xend[xq[xh % cap]] <= t:
            rq[rt % cap] = xq[xh % cap]
            rt += 1
            xh += 1
        # buffer management (seconds) and worker reconfiguration (minutes)
        while t >= next_sec:
            A.update_rate(q, ctrl, float((ft - fh) + (xt - xh) + (rt - rh)), arr_sec, up_sec)
            arr_sec = 0.0
            up_sec = 0.0
            next_sec += 1.0
        while t >= next_min:
            if nb > 0:
                ctx_mean_seen = kv_used / nb
            o2 = o
            if p[P_RESIZE] != 0.0:
                o2 = A.resize_choice(busy_f_min / 60.0, busy_d_min / 60.0, o, opt.shape[0])
            if o2 != o:  # move GPUs between the pools: queued fill work runs at the new speed
                queue = (fq, fh, ft, cap)
                KP.rescale_fills(
                    queue,
                    gen,
                    ctx,
                    rem_work,
                    e_rate,
                    fill_work,
                    fill_energy,
                    pre_t,
                    fill_grid,
                    o,
                    o2,
                )
                o = o2
                gpus_f, gpus_d, kv_cap, link_bps, idle_f, idle_d = opt[o]
                n_resize += 1
            busy_f_min = 0.0
            busy_d_min = 0.0
            cap_b = A.batch_cap(q, max_batch, dec_t[o], ctx_grid, ctx_mean_seen)
            next_min += 60.0
        # admission timeouts, then token-level admission into fill
        while wt > wh and t - arrival[wq[wh % cap]] > p[P_MAX_WAIT]:
            i = wq[wh % cap]
            wh += 1
            hs = KP.end_call(i, t, DROPPED, R_TIMEOUT, out, cnt, ses, heap, hs)
        k = A.fill_admissions(q, wt - wh, bucket, rt == rh and nb < cap_b and kv_used < kv_cap)
        if q[0] != 0:
            bucket -= k
        for _ in range(k):
            i = wq[wh % cap]
            wh += 1
            admitted[i] = t
            rem_tok[i] = max(new_tok[i], 1.0)
            rem_work[i] = fill_work[o, i]
            e_rate[i] = fill_energy[o, i] / fill_work[o, i] if fill_work[o, i] > 0 else 0.0
            fq[ft % cap] = i
            ft += 1
        # token level: ready sequences join the decode batch while their KV fits
        while rt > rh and nb < cap_b:
            i = rq[rh % cap]
            if not A.decode_fits(q, kv_used, ctx[i], kv_cap) and nb > 0:
                break
            rh += 1
            batch[nb] = i
            nb += 1
            kv_used += ctx[i]
            seq[i] = seqc
            seqc += 1
            up_sec += 1.0
        # length of this iteration
        dec_dt = 0.0
        dec_en = 0.0
        if nb > 0:
            dec_dt = KP.interp_row(dec_t[o], nb, ctx_grid, kv_used / nb)
            dec_en = KP.interp_row(dec_e[o], nb, ctx_grid, kv_used / nb)
        fill_busy = 0.0
        fill_en = 0.0
        link_en = 0.0
        filled = np.empty(0, np.int64)
        if mode_agg:
            fh, fill_busy, fill_en, filled = KP.fill_chunk(
                fq, fh, ft, cap, p[P_CHUNK], rem_tok, rem_work, e_rate
            )
            dt = dec_dt + fill_busy
        else:
            dt = dec_dt
        if dt <= 0.0:
            nxt = np.inf
            if hs > 0:
                nxt = min(nxt, hk[0])
            if xt > xh:
                nxt = min(nxt, xend[xq[xh % cap]])
            if not mode_agg and ft > fh:
                nxt = min(nxt, t + rem_work[fq[fh % cap]])
            if wt > wh:
                nxt = min(nxt, next_sec)
            if nxt == np.inf:
                break
            dt = max(nxt - t, 1e-9)
        t1 = t + dt
        if not mode_agg:
            fh, fill_busy, fill_en, filled = KP.fill_serve(
                fq, fh, ft, cap, t, t1, rem_work, e_rate, fill_end
            )
        # fills that completed in this iteration: first token, then transfer or ready buffer
        for i in filled:
            tf = fill_end[i] if not mode_agg else t1
            if np.isnan(first[i]):
                first[i] = tf
            if gen[i] == 0:
                gen[i] = 1
                ctx[i] = prefix_tok[i] + new_tok[i] + 1
            if gen[i] >= out_tok[i]:
                hs = KP.end_call(i, tf, DONE, R_NONE, out, cnt, ses, heap, hs)
            elif mode_agg:
                rq[rt % cap] = i
                rt += 1
            else:
                nbytes = ctx[i] * p[P_KV_BPT]
                start = max(tf, link_free)
                xend[i] = start + p[P_LINK_LAT_S] + nbytes / link_bps
                link_free = xend[i]
                kv_moved[i] += nbytes
                link_en += nbytes * p[P_LINK_J_PER_B]
                xq[xt % cap] = i
                xt += 1
        # decode step: every sequence emits one token; the stop is known only when reached
        if nb > 0:
            n_steps += 1
            kv_used += nb
            m = 0
            while m < nb:
                i = batch[m]
                gen[i] += 1
                ctx[i] += 1
                if gen[i] >= out_tok[i]:
                    hs = KP.end_call(i, t1, DONE, R_NONE, out, cnt, ses, heap, hs)
                    kv_used -= ctx[i]
                    nb -= 1
                    batch[m] = batch[nb]
                else:
                    m += 1
            # KV overflow: preempt the newest sequence and recompute it later (vLLM-style)
            while kv_used > kv_cap and nb > 0:
                v = 0
                for m in range(1, nb):
                    if seq[batch[m]] > seq[batch[v]]:
                        v = m
                i = batch[v]
                nb -= 1
                batch[v] = batch[nb]
                kv_used -= ctx[i]
                if nb == 0:
                    hs = KP.end_call(i, t1, DROPPED, R_KV_EXHAUSTED, out, cnt, ses, heap, hs)
                else:
                    preempt[i] += 1
                    rem_tok[i] = ctx[i]
                    rem_work[i] = KP.interp1(pre_t[o], fill_grid, ctx[i])
                    e_rate[i] = KP.interp1(pre_e[o], fill_grid, ctx[i]) / max(rem_work[i], 1e-12)
                    fq[ft % cap] = i
                    ft += 1
        if q[0] != 0:
            bucket = min(q[7], bucket + ctrl[0] * dt)
        busy_dec_s += dec_dt
        busy_fill_s += fill_busy
        busy_d_min += dec_dt
        busy_f_min += fill_busy
        # energy and busy GPU-seconds, spread over the fixed sample intervals
        if mode_agg:
            busy = gpus_d * dt if (dec_dt + fill_busy) > 0 else 0.0
            idle_e = idle_d * dt if busy == 0 else 0.0
        else:
            busy = gpus_d * dec_dt + gpus_f * fill_busy
            idle_e = idle_d * (dt - dec_dt) + idle_f * (dt - fill_busy)
        e_tot = dec_en + fill_en + link_en + idle_e
        snap[0], snap[1], snap[2], snap[3] = wt - wh, ft - fh, rt - rh, nb
        snap[4], snap[5], snap[6], snap[7] = cnt[0], kv_used, dec_dt, gpus_f
        ts, nts = KP.spread(ts, nts, t0, sample_s, t, t1, e_tot, busy, gpus_all, acc, snap)
        t = t1
    for i in range(n):
        if status[i] == UNARRIVED and not np.isnan(arrival[i]):
            status[i], reason[i], done[i] = DROPPED, R_HORIZON, t
    stats = np.array([n_steps, busy_dec_s, busy_fill_s, n_iter, n_resize, o])
    return arrival, admitted, first, done, status, reason, preempt, kv_moved, ts[:nts], stats
