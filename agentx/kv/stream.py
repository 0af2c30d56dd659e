"""KV tiers of a trace too large for memory: the chain kernel over a time-sorted spill.

``replay_tiers`` (lru, write-through, no hashes) holds a dozen per-call columns of the whole
trace. Here the trace arrives as partitions of whole sessions (agentx.traces.partitions):

1. ``KvScan.add`` gives each call its chain (a running id: sessions are whole per partition),
   the agent's smallest shared prefix and its token counts, and appends them to spill files
   by ``t_start_s`` range; the reference count of every candidate block size (doubling) is
   summed in closed form, so the block size fits ``max_refs`` exactly as in memory.
2. ``KvScan.run`` sorts each time range in memory (``t_start_s``, session, call index: the
   in-memory order) and feeds it to the resumable chain kernel (agentx.kv.chains.ChainState);
   each call's outcome goes to a spill file of its partition.
3. ``KvScan.per_call(i)`` is partition ``i``'s ``PER_CALL`` frame in row order.

The block size, chains, shared-prefix ids and visiting order are the in-memory ones, so the
outcomes are equal call for call (tests/test_outofcore.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.kv.budget import fit_counted, ref_counts
from agentx.replay.bounded import Spill, bucket_of
from agentx.traces.partitions import compact

N_SIZES = 40  # candidate block sizes: the asked size times 1, 2, 4, ... 2**39
CALL = np.dtype(
    [(c, "<f8" if c == "t" else "<i8")
     for c in ("t", "sess", "ci", "row", "chain", "n_in", "reused", "spt")]
)  # fmt: skip
OUT = np.dtype([("row", "<i8"), ("acc", "<i8", (7,))])
KEEP = ("session_id", "agent_id", "call_index", "t_start_s", "input_tokens",
        "reused_prefix_tokens", "is_compaction", "shared_prefix_tokens")  # fmt: skip


class KvScan:
    def __init__(self, folder, bounds, bs: int, max_refs: int, share_prefix: bool):
        self.folder, self.bounds, self.bs0 = folder, bounds, int(bs)
        self.max_refs, self.share_prefix = max_refs, share_prefix
        self.calls = Spill(folder, "calls", bounds.size + 1, CALL)
        self.n_sizes = max(1, min(N_SIZES, 62 - int(self.bs0).bit_length()))
        self.counts = np.zeros(self.n_sizes, np.int64)
        self.chain_max, self.chain_calls, self.sessions, self.spt_values = [], [], [], set()
        self.n_chain = self.n_sess = self.n = self.top = self.in_sum = self.re_sum = 0
        self.offsets: list[int] = []

    def add(self, off: int, df: pl.DataFrame) -> None:
        """Partition ``df`` (whole sessions, ``KEEP`` columns) starting at trace row ``off``."""
        self.offsets.append(off)
        agent = pl.col("agent_id").fill_null("")
        sid = df["session_id"]
        first = (sid != sid.shift(1)).fill_null(True)  # sessions are contiguous (validated)
        k = df.select(
            first.cum_sum().cast(pl.Int64).alias("s") - 1,
            agent.rank("dense").cast(pl.Int64).alias("a") - 1,
            pl.col("is_compaction").cast(pl.Int64).alias("c"),
            pl.col("shared_prefix_tokens").min().over("session_id", agent).alias("spt"),
        )
        # chain = (session, agent, compaction epoch), epochs counted in row order as in memory
        k = k.with_columns(pl.col("c").cum_sum().over("s", "a").alias("e"))
        key = pl.struct("s", "a", "e").rank("dense").cast(pl.Int64) - 1
        chain = k.select(key).to_series().to_numpy()
        n_in = df["input_tokens"].to_numpy().astype(np.int64)
        reused = df["reused_prefix_tokens"].to_numpy().astype(np.int64)
        nc = int(chain.max()) + 1 if chain.size else 0
        cmax = np.zeros(nc, np.int64)
        np.maximum.at(cmax, chain, n_in)
        self.chain_max.append(cmax)
        self.chain_calls.append(np.bincount(chain, minlength=nc))
        self.counts += ref_counts(n_in, reused, self.bs0, self.n_sizes, False)
        spt = k["spt"].to_numpy().astype(np.int64)
        self.spt_values.update(np.unique(spt).tolist())
        self.sessions.append(compact(sid.filter(first)))  # in the order of their local ids
        t = df["t_start_s"].to_numpy()
        rec = np.empty(df.height, CALL)
        rec["t"], rec["sess"] = t, k["s"].to_numpy() + self.n_sess
        rec["ci"], rec["row"] = df["call_index"].to_numpy(), np.arange(off, off + df.height)
        rec["chain"], rec["n_in"], rec["reused"], rec["spt"] = (
            chain + self.n_chain,
            n_in,
            reused,
            spt,
        )
        self.calls.add(bucket_of(t, self.bounds), rec)
        self.n_chain += nc
        self.n_sess += self.sessions[-1].len()
        self.n += df.height
        self.top = max(self.top, int(n_in.max(initial=1)))
        self.in_sum += int(n_in.sum())
        self.re_sum += int(reused.sum())

    def fit(self) -> tuple[int, str]:
        total = self.counts
        bs0 = self.bs0
        return fit_counted(
            lambda b: int(total[(b // bs0).bit_length() - 1]), bs0, self.top, self.max_refs
        )

    def run(self, caps, bytes_per_token: float) -> None:
        """Pass 2: every time range in order through the chain kernel at tier capacities
        ``caps`` (TierCapacities); outcomes to spill files, one per partition."""
        from agentx.kv.chains import ChainState

        self.caps = caps
        self.bs, self.note = self.fit()
        bs = self.bs
        rank = (
            (pl.concat(self.sessions).rank("dense").cast(pl.Int64).to_numpy())
            if self.sessions
            else np.zeros(0, np.int64)
        )
        self.sessions = []
        groups = (
            np.unique(np.array(sorted(self.spt_values), np.int64) // bs)
            if self.share_prefix
            else np.zeros(1, np.int64)
        )
        sh_start = np.cumsum(groups) - groups
        st = ChainState(caps.tokens(bytes_per_token), bs, 0, int(groups.sum()))
        slots = Slots(np.concatenate(self.chain_max or [np.zeros(0, np.int64)]), bs,
                      np.concatenate(self.chain_calls or [np.zeros(0, np.int64)]), st)  # fmt: skip
        self.chain_max = self.chain_calls = []
        self.out = Spill(self.folder, "kv", len(self.offsets), OUT)
        offsets = np.asarray(self.offsets, np.int64)
        self.acc_sum = np.zeros(7, np.int64)
        self.refs = 0
        for b in range(len(self.calls.paths)):
            r = self.calls.take(b)
            if r.size == 0:
                continue
            r = r[np.lexsort((r["row"], r["ci"], rank[r["sess"]], r["t"]))]
            n_in, reused = r["n_in"], r["reused"]
            n_blk, n_read, write_pos = -(-n_in // bs), -(-reused // bs), reused // bs
            spt = r["spt"] // bs if self.share_prefix else np.zeros(r.size, np.int64)
            sh_base = sh_start[np.searchsorted(groups, spt)]
            chain = r["chain"]
            acc = st.feed(slots.take(chain), n_blk, n_read, write_pos, n_in, reused, spt, sh_base)
            slots.done(chain)
            self.refs += int((n_read + n_blk - write_pos).sum())
            self.acc_sum += acc.sum(axis=0)
            rec = np.empty(r.size, OUT)
            rec["row"], rec["acc"] = r["row"], acc
            self.out.add(np.searchsorted(offsets, r["row"], side="right") - 1, rec)
        self.glob = st.glob.copy()

    def per_call(self, i: int, off: int, n: int, cfg) -> pl.DataFrame:
        """Partition ``i``'s ``PER_CALL`` frame (rows ``off`` .. ``off + n``), row order."""
        from agentx.kv.tiers import finish_frame

        r = self.out.take(i)
        acc, bpt = r["acc"], cfg.kv_bytes_per_token
        cols = {f"kv_{t}_hit_tokens": acc[:, j] for j, t in enumerate(("hbm", "dram", "ssd"))}
        cols["kv_recompute_tokens"] = acc[:, 3]
        cols["kv_ssd_to_dram_bytes"] = acc[:, 4].astype(np.float64) * bpt
        cols["kv_dram_to_hbm_bytes"] = acc[:, 5].astype(np.float64) * bpt
        created = acc[:, 6].astype(np.float64) * bpt
        cols["kv_hbm_to_dram_bytes"], cols["kv_dram_to_ssd_bytes"] = created, created.copy()
        return finish_frame(cols, r["row"] - off, n, cfg)

    def summary(self, cfg, sums: dict) -> dict:
        """summary.json["kv_tiers"] from the run's counters and the per-call column ``sums``."""
        from agentx.kv import TIER_NAMES, _GeoView, _summary, _Totals

        tiers = {
            t: {"blocks": int(self.glob[i]), "tokens": int(self.acc_sum[i])}
            for i, t in enumerate(TIER_NAMES)
        }
        counts = {
            "hits": tiers,
            "recompute": {"blocks": int(self.glob[3]), "tokens": int(self.acc_sum[3])},
            "distinct_blocks": int(self.glob[4]),
            "block_references": self.refs,
            "pinned_tokens": 0,
        }
        per_call = pl.DataFrame({k: [v] for k, v in sums.items()})
        geo = _GeoView(
            self.bs, self.note, _Totals(self.n, self.in_sum), _Totals(self.n, self.re_sum)
        )
        return _summary(counts, per_call, geo, self.caps, "lru", "write-through", cfg)


class Slots:
    """Chain slots in the kernel's position pool, recycled once a chain's last call is fed:
    the pool holds the live chains (their widest prompt in blocks, rounded up to a power of
    two so freed slots fit later chains), not every chain of the trace."""

    def __init__(self, widest_tokens: np.ndarray, bs: int, calls: np.ndarray, state) -> None:
        width = np.maximum(-(-widest_tokens // bs), 1)
        self.cls = np.ceil(np.log2(width)).astype(np.int64)  # slot of 2**cls positions
        self.base = np.full(width.size, -1, np.int64)
        self.left, self.state, self.top = calls.copy(), state, 0
        self.free: dict[int, np.ndarray] = {}

    def take(self, chain: np.ndarray) -> np.ndarray:
        """Per call its chain's base, placing chains seen for the first time."""
        new = np.unique(chain[self.base[chain] < 0])
        for k in np.unique(self.cls[new]).tolist():
            sel = new[self.cls[new] == k]
            free = self.free.get(k, np.zeros(0, np.int64))
            n = min(free.size, sel.size)
            self.base[sel[:n]], self.free[k] = free[:n], free[n:]
            m = sel.size - n
            self.base[sel[n:]] = self.top + (np.arange(m, dtype=np.int64) << k)
            self.top += m << k
        if self.top > self.state.pool:
            self.state.grow(pool=max(self.top, 2 * self.state.pool))
        return self.base[chain]

    def done(self, chain: np.ndarray) -> None:
        """Calls of ``chain`` were fed: chains with no call left give their slots back."""
        u, n = np.unique(chain, return_counts=True)
        self.left[u] -= n
        ended = u[self.left[u] == 0]
        self.state.release(self.base[ended])
        for k in np.unique(self.cls[ended]).tolist():
            got = self.base[ended[self.cls[ended] == k]]
            self.free[k] = np.concatenate((self.free.get(k, np.zeros(0, np.int64)), got))
