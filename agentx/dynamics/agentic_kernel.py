"""The agentic serving loop as one numba kernel: N closed-loop sessions on one instance.

Each iteration is one forward pass of an in-flight-batching server (vLLM V1 / SGLang):
running sequences are visited in admission order, every decoding one takes one token of the
``token_budget`` (and a new KV block when its context crosses a block boundary; if no block
can be freed, the newest running sequence is preempted, vLLM's policy), running prefills
continue in chunks, then waiting calls are admitted FIFO while fewer than ``max_running``
run, budget is left and their blocks fit (``prefix_cache.pin_call``). A call whose leading
blocks sit in DRAM/SSD first waits for their transfer over a FIFO host link (no compute);
its remaining prompt tokens are prefilled. Preemption frees the victim's blocks (they stay
cached) and requeues it at the head of the queue: ``recompute`` prefills its context again
(prefix hits apply), ``swap`` copies it out and back over the host link instead.

Closed loop: the first ``users`` sessions (in trace order) start at t = 0; a session's next
call arrives ``think_s`` after its previous answer; when a session ends its slot starts the
next session at once. The trace's own arrival times are not used.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from agentx.dynamics import kernel_parts as KP
from agentx.dynamics import prefix_cache as PC
from agentx.dynamics.pricing import fill_price

WAIT, LOAD, PREFILL, DECODE, FINISHED = 1, 2, 3, 4, 5
# parameter vector
P_USERS, P_MAX_RUN, P_BUDGET, P_BLOCK, P_BPT, P_DRAM_BPS, P_SSD_BPS, P_SAMPLE = range(8)
P_SWAP, P_HORIZON, P_FLOOR = 8, 9, 10
N_P = 11
# per-call float outputs (columns of ``res``)
C_ARR, C_ADM, C_FIRST, C_DONE, C_HIT_G, C_HIT_D, C_HIT_S, C_COMPUTED, C_LOADED_B = range(9)
N_C = 9
# timeseries columns (engine.AGENTIC_TS names them)
(T_T, T_KV, T_CACHED, T_RUN, T_WAIT, T_INSYS, T_HIT_G, T_HIT_O, T_QUERY, T_PREEMPT, T_OUT,
 T_PRE_TOK) = range(12)  # fmt: skip
N_T = 12


@njit(cache=True)
def _ts_row(ts, nts, t_row, st, nr, nw, acc):
    if nts == ts.shape[0]:
        grown = np.zeros((2 * nts, N_T))
        grown[:nts] = ts
        ts = grown
    pool = max(st[PC.S_POOL], 1)
    ts[nts, T_T] = t_row
    ts[nts, T_KV] = PC.used_blocks(st) / pool
    ts[nts, T_CACHED] = st[PC.S_CACHED] / pool
    ts[nts, T_RUN] = nr
    ts[nts, T_WAIT] = nw
    ts[nts, T_INSYS:] = acc[T_INSYS:]
    acc[:] = 0.0
    return ts, nts + 1


@njit(cache=True)
def agentic_kernel(calls, refs, prices, p, cache):
    inp, reused, out_tok, think, next_call, firsts, spans, reads = calls
    dec_t, ctx_grid, fill_t, new_grid, pre_grid = prices
    st, loc, ref, prv, nxt = cache
    n = inp.shape[0]
    bs = p[P_BLOCK]
    max_run = int(p[P_MAX_RUN])
    sample = p[P_SAMPLE]
    swap = p[P_SWAP] != 0.0
    res = np.full((n, N_C), np.nan)
    res[:, C_HIT_G:] = 0.0
    preempt = np.zeros(n, np.int32)
    phase = np.zeros(n, np.int8)
    gen = np.zeros(n, np.int64)
    kv = np.zeros(n, np.int64)  # tokens whose KV is held
    rem = np.zeros(n, np.int64)  # prompt tokens still to prefill
    anon = np.zeros(n, np.int64)
    nblk = np.zeros(n, np.int64)
    swapped = np.zeros(n, np.bool_)
    load_end = np.zeros(n)
    for i in range(n):
        nblk[i] = spans[i, 1] - spans[i, 0] + spans[i, 3] - spans[i, 2]
    cap = 2 * n + 2
    wq = np.empty(cap, np.int64)
    wh = wt = n + 1
    run = np.empty(max_run, np.int64)
    nr = 0
    sched = np.zeros(max_run, np.int64)  # 1 decode, 2+take prefill chunk
    hk = np.empty(n + 1)
    hv = np.empty(n + 1, np.int64)
    hs = 0
    users = min(int(p[P_USERS]), firsts.shape[0])
    for s in range(users):
        hs = KP.heap_push(hk, hv, hs, 0.0, firsts[s])
    next_session = users
    ts = np.zeros((1024, N_T))
    nts = 0
    acc = np.zeros(N_T)
    t = 0.0
    link_free = 0.0
    n_done = 0
    in_sys = 0
    n_iter = 0
    blocked = -1
    while n_done < n and t < p[P_HORIZON]:
        n_iter += 1
        while hs > 0 and hk[0] <= t:
            i = hv[0]
            res[i, C_ARR] = hk[0]
            acc[T_INSYS] += t - hk[0]
            hs = KP.heap_pop(hk, hv, hs)
            in_sys += 1
            phase[i] = WAIT
            wq[wt % cap] = i
            wt += 1
        for m in range(nr):
            i = run[m]
            if phase[i] == LOAD and load_end[i] <= t:
                phase[i] = PREFILL if rem[i] > 0 else DECODE
        budget = int(p[P_BUDGET])
        # 1. running decodes, each with the block its next token needs
        nd = 0
        ctx_sum = 0.0
        m = 0
        while m < nr:
            i = run[m]
            sched[m] = 0
            if phase[i] == DECODE:
                if (kv[i] + 1 + bs - 1) // bs > nblk[i] + anon[i]:
                    gone = False
                    while not PC.make_room(st, loc, prv, nxt, 1):
                        v = run[nr - 1]
                        nr -= 1
                        wh = _preempt(v, swap, cache, refs, spans, kv, anon, phase, swapped,
                                      preempt, res, p, wq, wh, cap)  # fmt: skip
                        if swapped[v]:
                            link_free = max(t, link_free) + kv[v] * p[P_BPT] / p[P_DRAM_BPS]
                        acc[T_PREEMPT] += 1
                        blocked = -1
                        if v == i:
                            gone = True
                            break
                    if gone:
                        break
                    st[PC.S_ANON] += 1
                    anon[i] += 1
                sched[m] = 1
                budget -= 1
                nd += 1
                ctx_sum += kv[i] + 1
            m += 1
        # 2. running prefills continue, in admission order
        fill_dt = 0.0
        for m in range(nr):
            i = run[m]
            if phase[i] == PREFILL and budget > 0:
                take = min(rem[i], budget)
                fill_dt += fill_price(fill_t, new_grid, pre_grid, take, kv[i])
                sched[m] = 2 + take
                budget -= take
        # 3. admission: FIFO while a slot, budget and blocks are free. A head that did not
        # fit is retried only once more blocks are free or evictable than when it failed.
        while wt > wh and nr < max_run and budget > 0:
            room = PC.free_blocks(st) + st[PC.S_LEN + PC.HBM]
            if room <= blocked:
                break
            i = wq[wh % cap]
            g, d, s_ = PC.lookup(refs, reads[i, 0], reads[i, 1], loc)
            # tokens whose KV it needs: the prompt; after a preemption also the tokens generated
            # so far (recompute feeds them all; a swapped one still lacks its last token's KV)
            target = inp[i] + gen[i] - (1 if swapped[i] and gen[i] > 0 else 0)
            extra = max(0, (target + bs - 1) // bs - nblk[i])
            if not PC.pin_call(st, loc, ref, prv, nxt, refs, spans[i], extra):
                blocked = room
                break
            blocked = -1
            wh += 1
            anon[i] = extra
            hg = min(g * bs, reused[i])
            hd = min((g + d) * bs, reused[i]) - hg
            hsd = min((g + d + s_) * bs, reused[i]) - hg - hd
            if np.isnan(res[i, C_ADM]):
                res[i, C_ADM] = t
                res[i, C_HIT_G], res[i, C_HIT_D], res[i, C_HIT_S] = hg, hd, hsd
                acc[T_HIT_G] += hg
                acc[T_HIT_O] += hd + hsd
                acc[T_QUERY] += inp[i]
            if swapped[i]:
                swapped[i] = False
                nbytes = (target - hg) * p[P_BPT]
                kv[i], rem[i] = target, 0
                dram_b, ssd_b = nbytes, 0.0
            else:
                kv[i] = min(hg + hd + hsd, target - 1)
                rem[i] = target - kv[i]
                dram_b, ssd_b = hd * p[P_BPT], hsd * p[P_BPT]
            run[nr] = i
            sched[nr] = 0
            nr += 1
            if dram_b + ssd_b > 0:
                start = max(t, link_free)
                load_end[i] = start + dram_b / p[P_DRAM_BPS] + ssd_b / p[P_SSD_BPS]
                link_free = load_end[i]
                res[i, C_LOADED_B] += dram_b + ssd_b
                phase[i] = LOAD
            elif rem[i] > 0:
                phase[i] = PREFILL
                take = min(rem[i], budget)
                fill_dt += fill_price(fill_t, new_grid, pre_grid, take, kv[i])
                sched[nr - 1] = 2 + take
                budget -= take
            else:
                phase[i] = DECODE
        dt = fill_dt
        if nd > 0:
            dt += KP.interp_row(dec_t, nd, ctx_grid, ctx_sum / nd)
        elif fill_dt > 0:
            dt += p[P_FLOOR]
        if dt <= 0.0:  # nothing to compute: jump to the next arrival or transfer
            nxt_t = hk[0] if hs > 0 else np.inf
            for m in range(nr):
                if phase[run[m]] == LOAD:
                    nxt_t = min(nxt_t, load_end[run[m]])
            if nxt_t == np.inf:
                break
            dt = max(nxt_t - t, 0.0)
            if dt == 0.0:
                continue
        t1 = t + dt
        acc[T_INSYS] += in_sys * dt
        # 4. the pass completes: tokens emitted, chunks done, finished calls leave
        keep = 0
        for m in range(nr):
            i = run[m]
            fin = False
            if sched[m] == 1:
                kv[i] += 1
                gen[i] += 1
                acc[T_OUT] += 1
                fin = gen[i] >= out_tok[i]
            elif sched[m] >= 2:
                take = sched[m] - 2
                kv[i] += take
                rem[i] -= take
                res[i, C_COMPUTED] += take
                acc[T_PRE_TOK] += take
                if rem[i] == 0:
                    gen[i] += 1
                    acc[T_OUT] += 1
                    if np.isnan(res[i, C_FIRST]):
                        res[i, C_FIRST] = t1
                    phase[i] = DECODE
                    fin = gen[i] >= out_tok[i]
            if fin:
                PC.unpin_call(st, loc, ref, prv, nxt, refs, spans[i], anon[i])
                anon[i] = 0
                phase[i] = FINISHED
                res[i, C_DONE] = t1
                n_done += 1
                in_sys -= 1
                j = next_call[i]
                if j >= 0:
                    hs = KP.heap_push(hk, hv, hs, t1 + think[j], j)
                elif next_session < firsts.shape[0]:
                    hs = KP.heap_push(hk, hv, hs, t1, firsts[next_session])
                    next_session += 1
            else:
                run[keep] = i
                keep += 1
        nr = keep
        while t1 >= (nts + 1) * sample:
            ts, nts = _ts_row(ts, nts, nts * sample, st, nr, wt - wh, acc)
        t = t1
    ts, nts = _ts_row(ts, nts, nts * sample, st, nr, wt - wh, acc)
    stats = np.array([n_iter, st[PC.S_EVICT], t], np.float64)
    return res, preempt, ts[:nts], stats


@njit(cache=True)
def _preempt(v, swap, cache, refs, spans, kv, anon, phase, swapped, preempt, res, p, wq, wh,
             cap):  # fmt: skip
    """Free ``v``'s blocks and put it back at the head of the waiting queue."""
    st, loc, ref, prv, nxt = cache
    PC.unpin_call(st, loc, ref, prv, nxt, refs, spans[v], anon[v])
    anon[v] = 0
    preempt[v] += 1
    if swap and phase[v] == DECODE:  # a prompt still being filled is recomputed instead
        swapped[v] = True
        res[v, C_LOADED_B] += kv[v] * p[P_BPT]  # the copy out; the copy back is charged on return
    phase[v] = WAIT
    wh -= 1
    wq[wh % cap] = v
    return wh
