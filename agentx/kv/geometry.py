"""Where each call's block references fall, in time order, without naming any block.

``geometry`` is what ``build_blocks`` (agentx.kv.blocks) and the chain kernel (agentx.kv.chains)
share: the time order of the calls, the block size that fits the reference budget, each call's
read/write block positions and its chain (session, agent, compaction epoch) and shared prefix.
All of it comes from integer keys made once: a session or agent string is compared only where
it changes between neighbouring rows (rows come grouped by session), and only those few run
heads are ranked, so no per-row string sort or struct rank is ever built. Chain ids keep the
lexicographic numbering of (session_id, agent_id, epoch) that a dense struct rank gives.

``batch_geometry`` is the same per frame of whole sessions with running id offsets, for callers
that stream a trace (docs/kv-tiers.md, "Geometry in batches").
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import polars as pl

from agentx.errors import InputError, UsageError
from agentx.kv.budget import fit_block_size
from agentx.kv.geometry_ops import assemble, keys_kernel
from agentx.kv.order import argsort_times, resort_runs
from agentx.traces.io import Trace

ORDER = ("t_start_s", "session_id", "call_index")
# Block references materialized at most. Measured peaks per reference: ~16 bytes with lru,
# ~48 with seed7 (3.3 and 10.2 GB for 212 M), so ~5 and ~14 GB here on a 24 GB machine. A
# trace with more references is re-blocked to the smallest power-of-two multiple that fits.
MAX_REFS = 300_000_000


@dataclass(frozen=True)
class CallKeys:
    """Per trace row: dense ranks as polars ranks the strings (lexicographic), 0-based."""

    run: np.ndarray  # int32: the row's run of equal (session_id, agent_id), in row order
    run_session: np.ndarray  # int64 per run: rank of its session_id
    chain: np.ndarray  # int32: rank of (session_id, agent_id or "", compaction epoch)
    agent_of_chain: np.ndarray  # int64 per chain: rank of its (session_id, agent_id)
    agent_spt_tokens: np.ndarray  # int64 per agent: smallest shared_prefix_tokens of the agent
    session_of_agent: np.ndarray  # int64 per agent

    def session_of(self, rows: np.ndarray) -> np.ndarray:
        """The rank of session_id of trace ``rows`` (no per-row column is kept: only the few
        tied rows of the time sort ask)."""
        return self.run_session[self.run[rows]]

    @property
    def n_sessions(self) -> int:
        return int(self.session_of_agent[-1]) + 1 if self.session_of_agent.size else 0


@dataclass(frozen=True)
class Geometry:
    """Per call, in time order: where its references fall, without naming any block.

    ``spt``: leading blocks of the call that are shared-prefix blocks (0 with global hashes
    or ``share_prefix=False``); without hashes shared ids come first, one run per distinct
    ``spt`` (``sh_base``: the call's first shared id; ``n_shared`` ids in all). ``row`` and
    ``chain`` are int32, the token and block columns int32 unless a prompt (or the shared ids)
    reaches 2^31 tokens, then int64; ``ref_off``, ``agent`` and
    ``spt_tokens`` are made on first use (the chain kernel needs none of them)."""

    row: np.ndarray
    bs: int
    note: str
    use_hashes: bool
    native: int | None
    scope: str
    n_in: np.ndarray
    reused: np.ndarray
    n_blk: np.ndarray
    n_read: np.ndarray
    write_pos: np.ndarray
    chain: np.ndarray
    spt: np.ndarray
    sh_base: np.ndarray
    n_shared: int
    n_refs: int
    agent_of_chain: np.ndarray  # per chain (from chain0 on): its (session, agent) id
    spt_tokens_of_chain: np.ndarray  # per chain: the shared-prefix size its calls use, tokens
    session_of_chain: np.ndarray  # per chain: its session's rank
    chain0: int = 0  # the first chain id (a batch's running offset)

    @cached_property
    def ref_off(self) -> np.ndarray:
        """Refs of call k are ``ref_off[k]:ref_off[k+1]`` in the stream, reads first."""
        off = np.zeros(self.row.size + 1, np.int64)
        np.cumsum(self.n_read + self.n_blk - self.write_pos, out=off[1:])
        return off

    @cached_property
    def agent(self) -> np.ndarray:
        return self.agent_of_chain[self.chain - self.chain0]

    @cached_property
    def session(self) -> np.ndarray:
        """Per call: the dense rank of its session_id (int64)."""
        return self.session_of_chain[self.chain - self.chain0]

    @cached_property
    def spt_tokens(self) -> np.ndarray:
        return self.spt_tokens_of_chain[self.chain - self.chain0]


def geometry(
    trace: Trace,
    block_size_tokens: int | None = None,
    *,
    share_prefix: bool = True,
    max_refs: int = MAX_REFS,
) -> Geometry:
    """The block geometry of the whole trace; calls taken by ``ORDER`` (stable)."""
    df = trace.calls
    use_hashes = df.height > 0 and bool(df["block_hashes"].is_not_null().all())
    native = _native_block_size(df, trace) if use_hashes else None
    bs = int(block_size_tokens) if block_size_tokens is not None else (native or 64)
    if bs <= 0:
        raise UsageError(f"--block-size-tokens must be positive, got {bs}")
    if use_hashes and bs % native:
        raise UsageError(
            f"--block-size-tokens {bs} must be a multiple of the trace's {native}-token hash blocks"
        )
    t = df["t_start_s"].to_numpy()
    # the time sort needs no key (numpy lets go of the GIL while it sorts): on the other core
    with ThreadPoolExecutor(max_workers=1) as pool:
        by_time = pool.submit(argsort_times, t)
        n_in, reused = _ints(df["input_tokens"]), _ints(df["reused_prefix_tokens"])
        bs, note = fit_block_size(n_in, reused, bs, use_hashes, max_refs)
        keys = call_keys(df, use_hashes)
        row = time_order(t, keys.session_of, df["call_index"], by_time.result())
    scope = trace.hash_scope if use_hashes else "none"
    spt_c = _chain_spt(keys, bs, share_prefix and scope != "global")
    groups = np.unique(spt_c)
    return _geometry(row, keys, n_in, reused, spt_c, groups, bs, note, use_hashes, native, scope)


def batch_geometry(
    calls: pl.DataFrame,
    block_size_tokens: int,
    shared_groups: np.ndarray,
    *,
    share_prefix: bool = True,
    chain0: int = 0,
    agent0: int = 0,
    row0: int = 0,
    session0: int = 0,
) -> tuple[Geometry, CallKeys]:
    """``geometry`` of a frame of whole sessions (no hashes) at a fixed block size: ``row``
    is ``row0`` + the frame's row, ``chain`` starts at ``chain0``, agents at ``agent0`` and
    sessions at ``session0``;
    ``shared_groups``: the trace's distinct ``spt`` values (``shared_groups`` of every batch,
    united). Returns the geometry (calls in time order) and the frame's keys."""
    keys = call_keys(calls, False)
    n_in, reused = _ints(calls["input_tokens"]), _ints(calls["reused_prefix_tokens"])
    row = time_order(calls["t_start_s"].to_numpy(), keys.session_of, calls["call_index"])
    spt_c = _chain_spt(keys, block_size_tokens, share_prefix)
    groups = np.asarray(shared_groups, np.int64)
    g = _geometry(
        row, keys, n_in, reused, spt_c, groups, block_size_tokens, "", False, None, "none"
    )
    wide = row0 + calls.height >= 2**31 or chain0 + spt_c.size >= 2**31  # ids past int32
    return replace(
        g,
        row=g.row.astype(np.int64 if wide else np.int32) + row0,
        chain=g.chain.astype(np.int64 if wide else np.int32) + chain0,
        agent_of_chain=g.agent_of_chain + agent0,
        session_of_chain=g.session_of_chain + session0,
        chain0=chain0,
    ), keys


def shared_groups(calls: pl.DataFrame, block_size_tokens: int, share_prefix: bool = True):
    """Distinct shared-prefix lengths (blocks) of a frame of whole sessions (no hashes)."""
    return np.unique(_chain_spt(call_keys(calls, False), block_size_tokens, share_prefix))


def _geometry(row, keys, n_in, reused, spt_c, groups, bs, note, use_hashes, native, scope):
    base = np.cumsum(groups) - groups  # shared ids: one run per distinct spt, in value order
    shb_c = base[np.searchsorted(groups, spt_c)] if groups.size else np.zeros(0, np.int64)
    # a call's blocks, positions and shared ids never pass its prompt's tokens (nor the
    # shared ids' count): 32 bits unless those reach 2^31, 28 B a call less (10 M calls:
    # 280 MB of the chain kernel's peak)
    top = max(int(n_in.max(initial=0)) + bs, int(base[-1] + groups[-1]) if groups.size else 0)
    like = np.empty(0, np.int32 if top < 2**31 else np.int64)
    cols = assemble(row, n_in, reused, keys.chain, spt_c, shb_c, bs, use_hashes, like)
    spt_tok = keys.agent_spt_tokens[keys.agent_of_chain]
    return Geometry(
        row=row, bs=bs, note=note, use_hashes=use_hashes, native=native, scope=scope,
        n_in=cols[0], reused=cols[1], n_blk=cols[2], n_read=cols[3], write_pos=cols[4],
        chain=cols[5], spt=cols[6], sh_base=cols[7], n_shared=int(groups.sum()),
        n_refs=int(cols[8]), agent_of_chain=keys.agent_of_chain, spt_tokens_of_chain=spt_tok,
        session_of_chain=keys.session_of_agent[keys.agent_of_chain],
    )  # fmt: skip


def call_keys(df: pl.DataFrame, use_hashes: bool) -> CallKeys:
    """Session, agent and chain ranks per row; ``agent_spt_tokens`` is the agent's smallest
    shared prefix, or its session's with hashes (a block is shared or private the same way
    in every call that names it)."""
    n = df.height
    sid, aid = df["session_id"], df["agent_id"]  # null (the main agent) ranks as ""
    head = np.ones(n, bool)  # a row whose (session, agent) differs from the row before
    if n > 1:  # slices, not shift(): no copy of the string columns
        a, b = slice(0, n - 1), slice(1, n)
        new = sid[b].ne_missing(sid[a]) | aid[b].ne_missing(aid[a])
        head[1:] = new.to_numpy()
    heads = pl.DataFrame({"session_id": sid.filter(head), "agent_id": aid.filter(head)})
    heads = heads.with_columns(pl.col("agent_id").fill_null(""))
    ranks = heads.select(  # the few run heads hold every distinct value, so ranks are exact
        pl.col("session_id").rank("dense").cast(pl.Int64) - 1,
        pl.struct("session_id", "agent_id").rank("dense").cast(pl.Int64).alias("a") - 1,
    )
    run = np.cumsum(head, dtype=np.int32 if n < 2**31 else np.int64)
    run -= 1
    h_session, h_agent = ranks["session_id"].to_numpy(), ranks["a"].to_numpy()
    n_agent = int(h_agent.max()) + 1 if n else 0
    session_of_agent = np.zeros(n_agent, np.int64)
    session_of_agent[h_agent] = h_session
    spt = _ints(df["shared_prefix_tokens"])
    comp = df["is_compaction"].to_numpy()
    chain = np.empty(n, np.int32 if n < 2**31 else np.int64)
    chain, agent_of_chain, amin = keys_kernel(run, h_agent, comp, spt, n_agent, chain)
    if use_hashes and n_agent:  # a session's agents have consecutive ids
        starts = np.flatnonzero(np.diff(session_of_agent, prepend=-1))
        amin = np.minimum.reduceat(amin, starts)[session_of_agent]
    return CallKeys(run, h_session, chain, agent_of_chain, amin, session_of_agent)


def time_order(t: np.ndarray, session_of, call_index: pl.Series, row=None) -> np.ndarray:
    """Rows by (t, session, call_index), equal keys in row order (a stable multi-key sort):
    one float sort, then only the rows whose time another row shares are sorted again.
    ``session_of(rows)``: the rows' session ranks; ``row``: ``order.argsort_times(t)`` when
    already made (it is re-sorted in place)."""
    row = argsort_times(t) if row is None else row  # ties in any order: re-sorted below
    # which sorted neighbours tie, a slice at a time (the sorted times are never whole)
    eq = np.empty(max(t.size - 1, 0), bool)
    for a in range(0, eq.size, TIE_STEP):
        ts = t[row[a : a + TIE_STEP + 1]]
        np.equal(ts[1:], ts[:-1], out=eq[a : a + TIE_STEP])
    resort_runs(row, eq, lambda r: (call_index.gather(r).to_numpy(), session_of(r)))
    return row.astype(np.int32 if t.size < 2**31 else np.int64, copy=False)


TIE_STEP = 1 << 16


def _chain_spt(keys: CallKeys, bs: int, share: bool) -> np.ndarray:
    if not share:
        return np.zeros(keys.agent_of_chain.size, np.int64)
    return keys.agent_spt_tokens[keys.agent_of_chain] // bs


def _ints(s: pl.Series) -> np.ndarray:
    return np.ascontiguousarray(s.to_numpy(), np.int64)


def _native_block_size(df: pl.DataFrame, trace: Trace) -> int:
    sizes = df["block_size_tokens"].unique().drop_nulls()
    if sizes.len() != 1:
        r = int(df["block_size_tokens"].ne_missing(df["block_size_tokens"][0]).arg_max())
        raise InputError(
            trace.meta.get("path", "<trace>"),
            f"expected one block size for the whole file, got {sorted(sizes.to_list())}",
            row=r,
            field="block_size_tokens",
        )
    return int(sizes[0])
