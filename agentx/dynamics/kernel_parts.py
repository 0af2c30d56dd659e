"""Small numba pieces of the simulator kernel: binary heap of arrivals, table lookups,
sample-interval accounting and the bookkeeping when a call leaves the system."""

from __future__ import annotations

import numpy as np
from numba import njit

N_TS = 11  # timeseries columns, see engine.TS_COLUMNS


@njit(cache=True)
def interp_row(table, b, grid, x):
    g = min(max(np.searchsorted(grid, x), 1), grid.shape[0] - 1)
    x0, x1 = grid[g - 1], grid[g]
    w = min(max((x - x0) / (x1 - x0), 0.0), 1.0)
    return table[b, g - 1] * (1 - w) + table[b, g] * w


@njit(cache=True)
def interp1(ys, grid, x):
    g = min(max(np.searchsorted(grid, x), 1), grid.shape[0] - 1)
    x0, x1 = grid[g - 1], grid[g]
    return ys[g - 1] + (ys[g] - ys[g - 1]) * (x - x0) / (x1 - x0)


@njit(cache=True)
def heap_push(hk, hv, hs, key, val):
    i = hs
    hk[i] = key
    hv[i] = val
    while i > 0:
        par = (i - 1) // 2
        if hk[par] < hk[i] or (hk[par] == hk[i] and hv[par] <= hv[i]):
            break
        hk[par], hk[i] = hk[i], hk[par]
        hv[par], hv[i] = hv[i], hv[par]
        i = par
    return hs + 1


@njit(cache=True)
def heap_pop(hk, hv, hs):
    hs -= 1
    hk[0], hv[0] = hk[hs], hv[hs]
    i = 0
    while True:
        lo, r, m = 2 * i + 1, 2 * i + 2, i
        if lo < hs and (hk[lo] < hk[m] or (hk[lo] == hk[m] and hv[lo] < hv[m])):
            m = lo
        if r < hs and (hk[r] < hk[m] or (hk[r] == hk[m] and hv[r] < hv[m])):
            m = r
        if m == i:
            return hs
        hk[m], hk[i] = hk[i], hk[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m


@njit(cache=True)
def spread(ts, nts, t0, sample_s, a, t1, e_tot, busy, gpus_all, acc, snap):
    """Spread an iteration's energy and busy GPU-seconds over the fixed sample intervals it
    covers, closing each finished interval with the state ``snap`` at the iteration's end."""
    dt = t1 - a
    bin_end = t0 + (nts + 1) * sample_s
    while t1 >= bin_end:
        frac = (bin_end - a) / dt
        acc[0] += e_tot * frac
        acc[1] += busy * frac
        if nts == ts.shape[0]:
            grown = np.zeros((2 * nts, N_TS))
            grown[:nts] = ts
            ts = grown
        ts[nts, 0] = t0 + nts * sample_s
        ts[nts, 1:5] = snap[0:4]
        ts[nts, 5] = acc[1] / (sample_s * gpus_all)
        ts[nts, 6] = acc[0] / sample_s
        ts[nts, 7:11] = snap[4:8]
        nts += 1
        acc[:] = 0.0
        a = bin_end
        bin_end = t0 + (nts + 1) * sample_s
    acc[0] += e_tot * (t1 - a) / dt
    acc[1] += busy * (t1 - a) / dt
    return ts, nts


@njit(cache=True)
def end_call(i, t_end, st, why, out, cnt, ses, heap, hs):
    """Call ``i`` leaves the system; its session's next call arrives after the think time."""
    status, reason, done = out
    next_call, t_start, think = ses
    hk, hv = heap
    status[i], reason[i], done[i] = st, why, t_end
    cnt[0] -= 1
    cnt[1] += 1
    j = next_call[i]
    if j >= 0:
        hs = heap_push(hk, hv, hs, max(t_start[j], t_end + think[j]), j)
    return hs


@njit(cache=True)
def rescale_fills(queue, gen, ctx, rem_work, e_rate, fill_work, fill_energy, pre_t, grid, o, o2):
    """Fill work still queued runs at the speed of the new fill pool (layout ``o2``)."""
    fq, fh, ft, cap = queue
    for c in range(fh, ft):
        i = fq[c % cap]
        if gen[i] == 0:
            rem_work[i] *= fill_work[o2, i] / max(fill_work[o, i], 1e-12)
            e_rate[i] = fill_energy[o2, i] / max(fill_work[o2, i], 1e-12)
        else:  # a preempted sequence waiting to be recomputed
            r0 = interp1(pre_t[o], grid, ctx[i])
            rem_work[i] *= interp1(pre_t[o2], grid, ctx[i]) / max(r0, 1e-12)


@njit(cache=True)
def fill_chunk(fq, fh, ft, cap, budget, rem_tok, rem_work, e_rate):
    """Aggregated: up to ``budget`` fill tokens ride on this decode step (chunked prefill).
    Returns the new queue head, the fill seconds and joules added, and the fills finished."""
    busy, energy = 0.0, 0.0
    filled = np.empty(0, np.int64)
    while ft > fh and budget > 0:
        i = fq[fh % cap]
        take = min(rem_tok[i], budget)
        w = rem_work[i] * take / rem_tok[i]
        busy += w
        energy += w * e_rate[i]
        rem_tok[i] -= take
        rem_work[i] -= w
        budget -= take
        if rem_tok[i] <= 0:
            fh += 1
            filled = np.append(filled, i)
    return fh, busy, energy, filled


@njit(cache=True)
def fill_serve(fq, fh, ft, cap, t, t1, rem_work, e_rate, fill_end):
    """Disaggregated: the fill pool works through its FIFO queue from ``t`` to ``t1``; each
    finished fill's exact end time goes to ``fill_end``."""
    tt, energy = t, 0.0
    filled = np.empty(0, np.int64)
    while ft > fh:
        i = fq[fh % cap]
        if tt + rem_work[i] <= t1:
            tt += rem_work[i]
            energy += rem_work[i] * e_rate[i]
            rem_work[i] = 0.0
            fh += 1
            filled = np.append(filled, i)
            fill_end[i] = tt
        else:
            energy += (t1 - tt) * e_rate[i]
            rem_work[i] -= t1 - tt
            tt = t1
            break
    return fh, tt - t, energy, filled
