"""Placement policies: which tier each block reference finds its block in.

* ``lru`` — exact LRU over an inclusive hierarchy HBM ⊂ DRAM ⊂ SSD, from one stack pass.
* ``seed7`` — SEED-7's advice: shared-prefix blocks that two or more sessions use (tool
  definitions, system prompt) are pinned in host DRAM: after their first write they never fall
  to SSD or recompute, and DRAM and SSD keep that many bytes less for an LRU of the other blocks
  (a second stack pass in which pinned blocks take no space). HBM stays one LRU over all blocks.
  Blocks a compaction made dead are freed at the compaction instead of ageing out (SEED-6).
* ``belady`` — Belady's MIN (evict the block whose next use is furthest) at each tier's
  capacity: the upper bound no online policy beats for equal-size blocks. Since MIN is a stack
  algorithm for equal sizes, the three runs nest like the LRU tiers.

A policy returns an ``Outcome``: segments of references with one call, kind, block size and
tier (0 HBM, 1 DRAM, 2 SSD, 3 found nowhere), and each block's tier after its last reference.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numba as nb
import numpy as np

from agentx.errors import UnknownNameError
from agentx.kv.blocks import BlockStream
from agentx.kv.stack import StackResult, lru_stack

POLICIES = ("lru", "seed7", "belady")
HBM, DRAM, SSD, NOWHERE = 0, 1, 2, 3


@dataclass(frozen=True)
class Outcome:
    call: np.ndarray  # call index in reference (time) order
    ref0: np.ndarray
    n: np.ndarray
    block_tokens: np.ndarray
    read_tokens: np.ndarray
    is_read: np.ndarray
    tier: np.ndarray  # int8: HBM, DRAM, SSD or NOWHERE (also every first touch)
    block_weight: np.ndarray  # tokens per block id
    final_tier: np.ndarray  # per block, after its last reference; -1 when freed early
    pinned_tokens: int = 0  # shared-prefix tokens held in DRAM outside the LRU (seed7)


def tiers_of(dist_tokens: np.ndarray, caps_tokens: np.ndarray) -> np.ndarray:
    """Smallest tier whose (inclusive, cumulative) capacity holds the distance; -1 → NOWHERE."""
    caps = np.maximum.accumulate(np.asarray(caps_tokens, np.float64))
    t = np.searchsorted(caps, dist_tokens, side="left").astype(np.int8)
    t[dist_tokens < 0] = NOWHERE
    return t


def prepare(policy: str, stream: BlockStream):
    """The capacity-independent stack pass(es) of ``policy`` (reused for every capacity)."""
    if policy not in POLICIES:
        raise UnknownNameError("KV policy", policy, POLICIES)
    st = lru_stack(stream)
    if policy == "seed7":  # free compaction-dead blocks: passes with the kill lists
        kills = compaction_kills(stream, st)
        # HBM stays LRU over every block; below it the pinned blocks take no LRU space
        st, rest = lru_stack(stream, *kills), lru_stack(stream, *kills, free=stream.shared)
        # per-reference distances, kept for every capacity of a curve
        return st, rest, np.repeat(st.dist_tokens, st.n), np.repeat(rest.dist_tokens, rest.n)
    return st


def outcome(policy: str, stream: BlockStream, caps_tokens, stack=None) -> Outcome:
    """Tiers of every reference under ``policy`` with capacities (HBM, DRAM, SSD) in tokens."""
    st = stack if stack is not None else prepare(policy, stream)
    caps = np.maximum.accumulate(np.asarray(caps_tokens, np.float64))
    if policy == "seed7":
        return _seed7(stream, *st, caps)
    out = _from_stack(st, caps)
    if policy == "belady":
        return _belady(stream, st, out, caps)
    return out


def _from_stack(st: StackResult, caps: np.ndarray) -> Outcome:
    final = tiers_of(st.final_dist_tokens, caps)
    final[st.final_dist_tokens < 0] = -1
    return Outcome(
        st.call, st.ref0, st.n, st.block_tokens, st.read_tokens, st.is_read,
        tiers_of(st.dist_tokens, caps), st.block_weight, final,
    )  # fmt: skip


def _lower(dist: np.ndarray, dram: float, ssd: float) -> np.ndarray:
    """Tier below HBM of a distance that excludes the pinned blocks."""
    t = np.where(dist <= dram, DRAM, np.where(dist <= ssd, SSD, NOWHERE)).astype(np.int8)
    t[dist < 0] = NOWHERE
    return t


def _seed7(stream: BlockStream, st, rest, d_hbm, d_rest, caps: np.ndarray) -> Outcome:
    pinned = int(st.block_weight[stream.shared].sum())
    dram, ssd = max(caps[1] - pinned, 0.0), max(caps[2] - pinned, 0.0)
    tier = _lower(d_rest, dram, ssd)
    sh = stream.shared[stream.ref_block] & (d_hbm >= 0)  # a pinned block is computed once
    tier[sh] = DRAM
    tier[(d_hbm >= 0) & (d_hbm <= caps[0])] = HBM
    final = _lower(rest.final_dist_tokens, dram, ssd)
    final[stream.shared] = DRAM
    final[(st.final_dist_tokens >= 0) & (st.final_dist_tokens <= caps[0])] = HBM
    final[st.final_dist_tokens < 0] = -1
    base = replace(_from_stack(st, caps), final_tier=final, pinned_tokens=pinned)
    return _resegment(stream, base, tier)


def compaction_kills(stream: BlockStream, st: StackResult) -> tuple[np.ndarray, np.ndarray]:
    """Blocks freed at a compaction: private blocks of the agent whose last use came before it."""
    live = np.flatnonzero((st.last_ref >= 0) & ~stream.shared)
    last_call = np.searchsorted(stream.ref_off, st.last_ref[live], side="right") - 1
    comp = np.flatnonzero(stream.compaction)
    n = stream.n_calls + 1
    comp_key = stream.agent[comp] * n + comp  # sorted by (agent, time)
    order = np.argsort(comp_key, kind="stable")
    comp_key, comp = comp_key[order], comp[order]
    blk_key = stream.agent[last_call] * n + last_call
    i = np.searchsorted(comp_key, blk_key, side="right")
    ok = i < comp.size
    ok[ok] = comp_key[i[ok]] // n == stream.agent[last_call[ok]]
    kill_call, kill_blk = comp[i[ok]], live[ok]
    order = np.argsort(kill_call, kind="stable")
    kill_off = np.zeros(n, np.int64)
    np.cumsum(np.bincount(kill_call, minlength=stream.n_calls), out=kill_off[1:])
    return kill_off, kill_blk[order].astype(np.int64)


def _belady(stream: BlockStream, st: StackResult, lru: Outcome, caps: np.ndarray) -> Outcome:
    nxt = _next_use(stream.ref_block, stream.n_blocks)
    tier = np.full(stream.n_refs, NOWHERE, np.int8)
    cum = np.maximum.accumulate(caps)
    for level in (SSD, DRAM, HBM):  # smaller capacities overwrite: the first tier that hits
        tier[_min_kernel(stream.ref_block, st.block_weight, float(cum[level]), nxt)] = level
    final = np.where(st.last_ref >= 0, HBM, -1).astype(np.int8)  # MIN's end state is unknown
    return _resegment(stream, replace(lru, final_tier=final), tier)


def _resegment(stream: BlockStream, base: Outcome, tier: np.ndarray) -> Outcome:
    """Split ``base``'s segments wherever the per-reference ``tier`` changes."""
    starts = np.zeros(stream.n_refs, bool)
    starts[base.ref0] = True
    starts[1:] |= tier[1:] != tier[:-1]
    ref0 = np.flatnonzero(starts)
    seg = np.searchsorted(base.ref0, ref0, side="right") - 1
    n = np.diff(np.append(ref0, stream.n_refs))
    call = base.call[seg]
    is_read = base.is_read[seg]
    bs = stream.block_size_tokens
    # only a call's last read block can be partly reused
    last_read = stream.ref_off[call] + stream.n_read[call] - 1
    partial = is_read & (ref0 <= last_read) & (last_read < ref0 + n)
    short = stream.n_read[call] * bs - stream.reused_tokens[call]
    read_tok = np.where(is_read, n * bs, 0) - np.where(partial, short, 0)
    return replace(
        base,
        call=call,
        ref0=ref0,
        n=n,
        block_tokens=base.block_tokens[seg],
        read_tokens=read_tok,
        is_read=is_read,
        tier=tier[ref0],
    )


@nb.njit(cache=True)
def _next_use(ref_block, n_blocks):  # pragma: no cover (compiled)
    never = np.int64(1) << 62
    seen = np.full(n_blocks, never, np.int64)
    nxt = np.empty(ref_block.size, np.int64)
    for t in range(ref_block.size - 1, -1, -1):
        b = ref_block[t]
        nxt[t] = seen[b]
        seen[b] = t
    return nxt


@nb.njit(cache=True)
def _min_kernel(ref_block, weight, cap, nxt):  # pragma: no cover (compiled)
    """Belady's MIN for ``cap`` tokens; heap entries go stale when a block is used again."""
    n_blocks = weight.size
    cached = np.zeros(n_blocks, np.bool_)
    due = np.full(n_blocks, -1, np.int64)
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    used = 0.0
    hit = np.zeros(ref_block.size, np.bool_)
    for t in range(ref_block.size):
        b = ref_block[t]
        if cached[b]:
            hit[t] = True
        else:
            cached[b] = True
            used += weight[b]
        due[b] = nxt[t]
        heapq.heappush(heap, (-nxt[t], b))
        while used > cap and len(heap) > 0:
            negdue, v = heapq.heappop(heap)
            if cached[v] and due[v] == -negdue:
                cached[v] = False
                used -= weight[v]
    return hit
