"""The polars geometry agentx.kv.geometry replaced (struct-of-strings dense ranks, a string
sort for time order), kept verbatim as the oracle the integer-key version must equal."""

from __future__ import annotations

import numpy as np
import polars as pl

ORDER = ("t_start_s", "session_id", "call_index")


def old_ref_count(n_in, reused, bs, use_hashes) -> int:
    n_read = -(-reused // bs)
    write_pos = n_read if use_hashes else reused // bs
    return int((n_read + -(-n_in // bs) - write_pos).sum())


def old_fit_block_size(n_in, reused, bs, use_hashes, max_refs):
    """Returns (bs, note) or the error text."""
    asked = bs
    n = old_ref_count(n_in, reused, bs, use_hashes)
    if n <= max_refs:
        return bs, ""
    top = max(int(n_in.max(initial=1)), 1)
    while n > max_refs and bs < 2 * top:
        bs *= 2
        n = old_ref_count(n_in, reused, bs, use_hashes)
    if n > max_refs:
        return f"needs {n:,}"
    first = old_ref_count(n_in, reused, asked, use_hashes)
    return bs, (
        f"re-blocked from {asked} to {bs} tokens: {first:,} block references exceed the "
        f"budget of {max_refs:,} (--max-block-refs); {n:,} at {bs}"
    )


def old_chains(df: pl.DataFrame):
    agent = pl.col("agent_id").fill_null("")
    epoch = pl.col("is_compaction").cast(pl.Int64).cum_sum().over(["session_id", agent])
    key = df.select(pl.col("session_id"), agent, epoch.alias("epoch"))
    ranks = key.select(
        pl.struct(pl.all()).rank("dense").alias("chain"),
        pl.struct("session_id", "agent_id").rank("dense").alias("agent"),
    )
    return (
        ranks["chain"].to_numpy().astype(np.int64) - 1,
        ranks["agent"].to_numpy().astype(np.int64) - 1,
    )


def old_geometry(df: pl.DataFrame, bs: int, use_hashes: bool, scope: str, share_prefix: bool):
    """The old geometry's arrays (after the block size was fitted) as a dict."""
    row = df.select(pl.arg_sort_by([*ORDER], maintain_order=True)).to_series().to_numpy()
    row = row.astype(np.int64)

    def col(name):
        return df[name].to_numpy()[row].astype(np.int64)

    n_in = col("input_tokens")
    reused = col("reused_prefix_tokens")
    n_blk = -(-n_in // bs)
    n_read = -(-reused // bs)
    write_pos = n_read.copy() if use_hashes else reused // bs
    ref_off = np.zeros(df.height + 1, np.int64)
    np.cumsum(n_read + n_blk - write_pos, out=ref_off[1:])
    chain, agent = (a[row] for a in old_chains(df))
    keys = ["session_id"] if use_hashes else ["session_id", pl.col("agent_id").fill_null("")]
    spt_min = df.select(pl.col("shared_prefix_tokens").min().over(keys)).to_series()
    spt = spt_min.to_numpy()[row].astype(np.int64) // bs
    if not share_prefix or scope == "global":
        spt[:] = 0
    groups, gi = np.unique(spt, return_inverse=True)
    spt_tokens = spt_min.to_numpy()[row].astype(np.int64)
    return dict(
        row=row, n_in=n_in, reused=reused, n_blk=n_blk, n_read=n_read, write_pos=write_pos,
        ref_off=ref_off, chain=chain, agent=agent, spt=spt, spt_tokens=spt_tokens,
        sh_base=(np.cumsum(groups) - groups)[gi].astype(np.int64), n_shared=int(groups.sum()),
    )  # fmt: skip


def old_finish_frame(cols: dict, row, n_rows: int, cfg) -> pl.DataFrame:
    """The per-call KV frame as placed before: time and energy in time order, then scattered."""
    from agentx.kv.tiers import LINKS, PER_CALL, link_costs

    costs = link_costs(cfg)
    cols = dict(cols)
    cols["kv_transfer_time_s"] = np.maximum(
        cols["kv_ssd_to_dram_bytes"] / costs["ssd_to_dram"][0],
        cols["kv_dram_to_hbm_bytes"] / costs["dram_to_hbm"][0],
    )
    cols["kv_transfer_energy_j"] = sum(cols[f"kv_{k}_bytes"] * costs[k][1] for k in LINKS)
    frame = {}
    for name in PER_CALL:
        if name.endswith("_tokens"):
            v = np.zeros(n_rows, np.int64)
            v[row] = np.rint(cols.pop(name)).astype(np.int64)
        else:
            v = np.zeros(n_rows, np.float64)
            v[row] = cols.pop(name)
        frame[name] = v
    return pl.DataFrame(frame)
