"""What an agentic simulation runs on, for ``agentx.dynamics.agentic``: its settings, the
instance and the prepared trace.

Owns ``AgenticConfig`` (scheduler, offload, preemption and think-time settings, checked on
construction) with the names they take (``OFFLOAD``, ``PREEMPTION``, ``FREE_ORDER``);
``Instance`` and ``instance_for`` (the HBM pool sized as vLLM does, the offload tiers and links
of the system, the iteration prices); ``Prepared`` and ``prepare`` (the trace in session order
with each call's block references); ``check_pool`` (the largest call must fit the pool).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from agentx.dynamics.names import OFFLOAD, PREEMPTION
from agentx.dynamics.pricing import PriceTables
from agentx.errors import CapacityError, UnknownNameError, UsageError

FREE_ORDER = ("tail-first", "in-order")


@dataclass(frozen=True)
class AgenticConfig:
    max_running: int = 256  # sequences in flight (vLLM max_num_seqs)
    token_budget: int = 4096  # tokens per iteration, decodes + prefill chunks (--chunk-tokens)
    preemption: str = "recompute"
    offload: str = "none"
    think_scale: float = 1.0
    sample_s: float = 1.0
    horizon_s: float = math.inf
    max_think_s: float = math.inf  # cap on the trace's think times (idle gaps of hours)
    # "tail-first": a finished sequence's blocks become evictable last block first (vLLM),
    # "in-order": in reference order, i.e. plain LRU as agentx.kv's exact stack models it.
    free_order: str = "tail-first"

    def __post_init__(self) -> None:
        if self.free_order not in FREE_ORDER:
            raise UnknownNameError("free order", self.free_order, FREE_ORDER)
        if not self.max_think_s >= 0:
            raise UsageError(f"--max-think-s must be non-negative, got {self.max_think_s}")
        if self.offload not in OFFLOAD:
            raise UnknownNameError("offload tier", self.offload, OFFLOAD)
        if self.preemption not in PREEMPTION:
            raise UnknownNameError("preemption mode", self.preemption, PREEMPTION)
        for name, v in (("--max-batch", self.max_running), ("--chunk-tokens", self.token_budget)):
            if v < 1:
                raise UsageError(f"{name} must be a positive integer, got {v}")
        if not self.think_scale >= 0 or not math.isfinite(self.think_scale):
            raise UsageError(f"--think-scale must be a non-negative number, got {self.think_scale}")


@dataclass(frozen=True)
class Instance:
    """One serving instance as the simulator sees it."""

    name: str
    gpus: int
    kv_bytes_per_token: float
    pool_tokens: float  # HBM KV pool of the instance
    dram_bytes: float
    ssd_bytes: float
    dram_bytes_per_s: float  # host link, DRAM → HBM
    ssd_bytes_per_s: float
    prices: PriceTables = field(repr=False)


def instance_for(cfg, gpu_memory_utilization: float = 0.9, max_running: int = 256) -> Instance:
    """Size the pool as vLLM does: a ``gpu_memory_utilization`` share of HBM, less weights,
    activations and workspace, holds KV (per GPU share of a token from the layout)."""
    from agentx.dynamics.pricing import iteration_pricing
    from agentx.kv.tiers import capacities_for, link_costs
    from agentx.replay.footprint import describe, footprint_per_gpu, kv_share_per_gpu

    if not 0 < gpu_memory_utilization <= 1:
        raise UsageError(
            f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}"
        )
    fp = footprint_per_gpu(cfg, 0.0)
    free = gpu_memory_utilization * fp.capacity_bytes - fp.total_bytes
    if free <= 0:
        raise CapacityError(
            f"{describe(cfg)}: weights, activations and workspace take {fp.total_bytes / 1e9:.1f} GB "
            f"of the {gpu_memory_utilization:g} × {fp.capacity_bytes / 1e9:.0f} GB per GPU; "
            "no room for KV (more GPUs, lower --weight-precision or higher --gpu-memory-utilization)"
        )
    per_token = cfg.kv_bytes_per_token * kv_share_per_gpu(cfg)
    caps = capacities_for(cfg)
    links = link_costs(cfg)
    return Instance(
        name=describe(cfg),
        gpus=cfg.gpus,
        kv_bytes_per_token=float(cfg.kv_bytes_per_token),
        pool_tokens=float(free / per_token),
        dram_bytes=float(caps.dram_bytes),
        ssd_bytes=float(caps.ssd_bytes),
        dram_bytes_per_s=float(links["dram_to_hbm"][0]),
        ssd_bytes_per_s=float(min(links["ssd_to_dram"][0], links["dram_to_hbm"][0])),
        prices=iteration_pricing(cfg, max_running),
    )


@dataclass(frozen=True)
class Prepared:
    """A trace in session order with each call's block references (shared by a sweep)."""

    calls: pl.DataFrame  # session_id, call_index, input/reused/new/output tokens, think_time_s
    refs: np.ndarray
    spans: np.ndarray  # [call, 4]: the prompt's blocks are refs[s0:s1] and refs[s2:s3]
    reads: np.ndarray  # [call, 2]: first ref and count of the blocks the reused prefix reads
    next_call: np.ndarray
    firsts: np.ndarray  # first call of each session, sessions in trace order
    block_size_tokens: int
    note: str  # how prefixes were matched, said to the user


def prepare(trace) -> Prepared:
    from agentx.kv.blocks import build_blocks

    df = trace.calls
    if df.height == 0:
        raise UsageError("the trace has no calls")
    stream = build_blocks(trace)
    hashed = bool(df["block_hashes"].is_not_null().all())
    note = (
        f"prefixes matched by the trace's block hashes ({stream.block_size_tokens}-token blocks)"
        if hashed
        else "the trace has no block hashes: prefixes matched by token counts "
        f"(reused_prefix_tokens) in {stream.block_size_tokens}-token blocks"
    )
    if stream.block_size_note:
        note += "; " + stream.block_size_note
    first_t = pl.col("t_start_s").min().over("session_id")
    order = (
        df.with_row_index("_row")
        .with_columns(first_t.alias("_t0"))
        .sort(["_t0", "session_id", "call_index"])["_row"]
        .to_numpy()
        .astype(np.int64)
    )
    inv = np.empty(df.height, np.int64)
    inv[stream.row] = np.arange(df.height)
    k = inv[order]
    r0, r1 = stream.ref_off[k], stream.ref_off[k + 1]
    n_read = stream.n_read[k]
    spans = np.stack([r0, r0 + np.minimum(n_read, stream.write_pos[k]), r0 + n_read, r1], 1)
    calls = df[order].select(
        "session_id",
        "call_index",
        "input_tokens",
        "reused_prefix_tokens",
        "new_tokens",
        "output_tokens",
        pl.col("think_time_s").fill_null(0.0),
    )
    sid = calls["session_id"].to_numpy()
    same = np.zeros(len(sid), bool)
    same[:-1] = sid[:-1] == sid[1:]
    nxt = np.where(same, np.arange(len(sid)) + 1, -1).astype(np.int64)
    firsts = np.flatnonzero(np.concatenate(([True], ~same[:-1]))).astype(np.int64)
    return Prepared(
        calls, stream.ref_block, spans.astype(np.int64), np.stack([r0, n_read], 1).astype(np.int64),
        nxt, firsts, stream.block_size_tokens, note,
    )  # fmt: skip


def check_pool(prep: Prepared, inst: Instance, pool_blocks: int) -> None:
    """One line naming the largest call when it cannot run alone in the pool."""
    bs = prep.block_size_tokens
    need = -(-(prep.calls["input_tokens"] + prep.calls["output_tokens"]).to_numpy() // bs)
    worst = int(np.argmax(need))
    if need[worst] > pool_blocks:
        row = prep.calls.row(worst, named=True)
        gb = lambda blocks: blocks * bs * inst.kv_bytes_per_token / 1e9  # noqa: E731
        raise CapacityError(
            f"call {row['session_id']}#{row['call_index']} needs {gb(need[worst]):.1f} GB of KV "
            f"({row['input_tokens']:,} + {row['output_tokens']:,} tokens) but the HBM pool of "
            f"{inst.name} holds {gb(pool_blocks):.1f} GB: short by "
            f"{gb(need[worst] - pool_blocks):.1f} GB"
        )
