"""Agentic serving as the public agentic benchmarks run it: N closed-loop sessions on one
instance with a prefix cache in HBM, optional DRAM/SSD offload and preemption (docs/dynamics.md).

``prepare(trace)`` builds, once per trace, the block references of every call
(``agentx.kv.blocks``: the trace's block hashes, shared system + tool prefixes under one id;
without hashes, prefixes matched by token counts) in session order. ``instance_for(cfg)`` sizes
the HBM pool from the footprint and reads the offload tiers and links of the system.
``simulate_users(prep, inst, users, cfg)`` runs the kernel (``agentic_kernel``) and returns
per-call and per-second frames and a summary; ``sweep`` runs several N on one preparation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from agentx.dynamics import agentic_kernel as K
from agentx.dynamics import prefix_cache as PC
from agentx.dynamics.pricing import PriceTables
from agentx.errors import CapacityError, UnknownNameError, UsageError

OFFLOAD = ("none", "dram", "dram+ssd")
PREEMPTION = ("recompute", "swap")
FREE_ORDER = ("tail-first", "in-order")
TS_COLUMNS = (
    "t_s",
    "kv_usage_ratio",
    "kv_cached_ratio",
    "running_seqs",
    "waiting_seqs",
    "in_system_mean",
    "gpu_hit_tokens",
    "offload_hit_tokens",
    "queried_tokens",
    "preemptions",
    "output_tokens",
    "prefill_tokens",
)
SUMMARY_COLUMNS = (
    "users",
    "calls",
    "done",
    "kv_pool_tokens",
    "kv_usage_p50",
    "kv_usage_p90",
    "kv_usage_max",
    "gpu_prefix_hit_ratio",
    "offload_hit_ratio",
    "recomputed_tokens",
    "preemptions",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "output_tok_s",
    "total_tok_s",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "makespan_s",
    "littles_law_rel_error",
)


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


@dataclass(frozen=True)
class AgenticResult:
    calls: pl.DataFrame
    timeseries: pl.DataFrame
    summary: dict


def simulate_users(
    prep: Prepared,
    inst: Instance,
    users: int,
    cfg: AgenticConfig | None = None,
    pool_blocks: int | None = None,
) -> AgenticResult:
    """Run ``users`` closed-loop sessions; ``pool_blocks`` overrides the HBM pool (tests)."""
    cfg = cfg or AgenticConfig()
    if users < 1:
        raise UsageError(f"--users must be positive integers, got {users}")
    bs = prep.block_size_tokens
    bpt = inst.kv_bytes_per_token
    if pool_blocks is None:
        pool_blocks = int(inst.pool_tokens // bs)
    check_pool(prep, inst, pool_blocks)
    dram = int(inst.dram_bytes / (bpt * bs)) if cfg.offload != "none" else 0
    ssd = int(inst.ssd_bytes / (bpt * bs)) if cfg.offload == "dram+ssd" else 0
    n_blocks = int(prep.refs.max()) + 1 if prep.refs.size else 1
    cache = PC.new_state(n_blocks, pool_blocks, dram, ssd, cfg.free_order == "in-order")
    p = np.zeros(K.N_P)
    p[K.P_USERS], p[K.P_MAX_RUN], p[K.P_BUDGET], p[K.P_BLOCK] = (
        users, cfg.max_running, cfg.token_budget, bs,
    )  # fmt: skip
    p[K.P_BPT], p[K.P_DRAM_BPS], p[K.P_SSD_BPS] = bpt, inst.dram_bytes_per_s, inst.ssd_bytes_per_s
    p[K.P_FLOOR] = inst.prices.floor_s
    p[K.P_SAMPLE], p[K.P_SWAP], p[K.P_HORIZON] = (
        cfg.sample_s, float(cfg.preemption == "swap"), cfg.horizon_s,
    )  # fmt: skip
    c = prep.calls
    cols = (
        c["input_tokens"].to_numpy().astype(np.int64),
        c["reused_prefix_tokens"].to_numpy().astype(np.int64),
        c["output_tokens"].to_numpy().astype(np.int64),
        np.minimum(c["think_time_s"].to_numpy().astype(np.float64), cfg.max_think_s)
        * cfg.think_scale,
        prep.next_call, prep.firsts, prep.spans, prep.reads,
    )  # fmt: skip
    pr = inst.prices
    prices = (pr.decode_s, pr.ctx_grid, pr.fill_s, pr.new_grid, pr.prefix_grid)
    res, preempt, ts, stats = K.agentic_kernel(cols, prep.refs, prices, p, cache)
    calls = _calls_frame(prep, res, preempt, users)
    tsf = pl.DataFrame({n: ts[:, k] for k, n in enumerate(TS_COLUMNS)}).with_columns(
        pl.col("in_system_mean") / cfg.sample_s,
        *(pl.col(n).cast(pl.Int64) for n in TS_COLUMNS[3:5] + TS_COLUMNS[6:]),
        users=pl.lit(users, pl.Int64),
    )
    q = pl.col("queried_tokens")
    tsf = tsf.with_columns(
        gpu_prefix_hit_ratio=pl.when(q > 0).then(pl.col("gpu_hit_tokens") / q),
        offload_hit_ratio=pl.when(q > 0).then(pl.col("offload_hit_tokens") / q),
    )
    summary = _summary(calls, tsf, inst, users, pool_blocks * bs, stats, cfg.sample_s)
    summary.update(
        instance=inst.name,
        block_size_tokens=bs,
        prefix_matching=prep.note,
        evictions=int(stats[1]),
        iterations=int(stats[0]),
        config={k: (None if v == math.inf else v) for k, v in asdict(cfg).items()},  # strict JSON
        pricing=pr.source,
    )
    return AgenticResult(calls, tsf, summary)


def _calls_frame(prep, res, preempt, users) -> pl.DataFrame:
    c = prep.calls
    f = pl.DataFrame(
        {
            "users": np.full(c.height, users, np.int64),
            "session_id": c["session_id"],
            "call_index": c["call_index"],
            "arrival_s": res[:, K.C_ARR],
            "admitted_s": res[:, K.C_ADM],
            "first_token_s": res[:, K.C_FIRST],
            "done_s": res[:, K.C_DONE],
            "input_tokens": c["input_tokens"],
            "reused_prefix_tokens": c["reused_prefix_tokens"],
            "output_tokens": c["output_tokens"],
            "gpu_hit_tokens": res[:, K.C_HIT_G].astype(np.int64),
            "dram_hit_tokens": res[:, K.C_HIT_D].astype(np.int64),
            "ssd_hit_tokens": res[:, K.C_HIT_S].astype(np.int64),
            "prefill_tokens": res[:, K.C_COMPUTED].astype(np.int64),
            "recomputed_tokens": np.maximum(
                # a fully cached prompt still computes its last token (vLLM): not a recompute
                res[:, K.C_COMPUTED] - np.maximum(c["new_tokens"].to_numpy(), 1), 0
            ).astype(np.int64),
            "preemptions": preempt.astype(np.int64),
            "kv_loaded_bytes": res[:, K.C_LOADED_B],
        }
    ).with_columns(pl.col(n).fill_nan(None) for n in ("arrival_s", "admitted_s", "first_token_s", "done_s"))  # fmt: skip
    return f.with_columns(
        ttft_s=pl.col("first_token_s") - pl.col("arrival_s"),
        tpot_s=pl.when(pl.col("output_tokens") > 1).then(
            (pl.col("done_s") - pl.col("first_token_s")) / (pl.col("output_tokens") - 1)
        ),
    )


def _summary(f, ts, inst: Instance, users, pool_tokens, stats, sample_s: float) -> dict:
    done = f.filter(pl.col("done_s").is_not_null())
    span = max(float(stats[2]), 1e-9)
    q = lambda c, x: None if done[c].drop_nulls().is_empty() else float(done[c].quantile(x))  # noqa: E731
    queried = max(int(done["input_tokens"].sum()), 1)
    out_tok = int(done["output_tokens"].sum())
    total_tok = out_tok + int(done["input_tokens"].sum())
    arrived = f.filter(pl.col("arrival_s").is_not_null())
    stay = (arrived["done_s"].fill_null(span) - arrived["arrival_s"]).sum()
    lam_w = float(stay) / span  # λ·W over the run
    # L from the kernel's own in-system counter, integrated over every interval
    l_sampled = float(ts["in_system_mean"].sum()) * sample_s / span
    kv = ts["kv_usage_ratio"]
    return {
        "users": users,
        "calls": f.height,
        "done": done.height,
        "kv_pool_tokens": float(pool_tokens),
        "kv_usage_p50": float(kv.quantile(0.5)) if kv.len() else 0.0,
        "kv_usage_p90": float(kv.quantile(0.9)) if kv.len() else 0.0,
        "kv_usage_max": float(kv.max()) if kv.len() else 0.0,
        "gpu_prefix_hit_ratio": float(done["gpu_hit_tokens"].sum()) / queried,
        "offload_hit_ratio": float(done["dram_hit_tokens"].sum() + done["ssd_hit_tokens"].sum())
        / queried,
        "recomputed_tokens": int(f["recomputed_tokens"].sum()),
        "preemptions": int(f["preemptions"].sum()),
        "ttft_p50_s": q("ttft_s", 0.5),
        "ttft_p90_s": q("ttft_s", 0.9),
        "ttft_p99_s": q("ttft_s", 0.99),
        "tpot_p50_s": q("tpot_s", 0.5),
        "tpot_p90_s": q("tpot_s", 0.9),
        "tpot_p99_s": q("tpot_s", 0.99),
        "output_tok_s": out_tok / span,
        "total_tok_s": total_tok / span,
        "output_tok_s_per_gpu": out_tok / span / inst.gpus,
        "total_tok_s_per_gpu": total_tok / span / inst.gpus,
        "makespan_s": span,
        "littles_law_rel_error": abs(l_sampled - lam_w) / max(lam_w, 1e-12),
    }


def sweep(prep: Prepared, inst: Instance, users: list[int], cfg: AgenticConfig | None = None):
    """Several N on one preparation: (calls, timeseries, one summary row per N)."""
    runs = [simulate_users(prep, inst, n, cfg) for n in users]
    table = pl.DataFrame([{k: r.summary[k] for k in SUMMARY_COLUMNS} for r in runs])
    return (
        pl.concat([r.calls for r in runs]),
        pl.concat([r.timeseries for r in runs]),
        table,
        [r.summary for r in runs],
    )
