"""Replay a trace through the cost model: per-call, per-stage and footprint tables + summary.

``replay_trace`` is the library behind ``agentx replay``. It prices every call with the closed
forms of ``agentx.replay.stages`` (one pass over whole columns), sums the stages, and sizes
the per-GPU HBM footprint with the resident KV of a full decode batch. Column meanings,
units and formulas: docs/metrics.md.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.errors import InputError
from agentx.replay.energy import coefficients
from agentx.replay.footprint import check_fits, describe, footprint_per_gpu
from agentx.replay.stages import KEYS, STAGES
from agentx.replay.timeline import QUANTILES, quantiles, resident_context

TRACE_COLUMNS = (
    "session_id",
    "call_index",
    "agent_id",
    "t_start_s",
    "input_tokens",
    "reused_prefix_tokens",
    "new_tokens",
    "output_tokens",
)
# The trace columns only the KV tiers read (geometry and block ids).
KV_COLUMNS = ("is_compaction", "shared_prefix_tokens", "block_size_tokens", "block_hashes")
LATENCY = ("ttft_s", "decode_latency_s")
CALL_KEYS = ("time_s", "energy_j", "flops", "hbm_bytes", "comm_bytes")
ENERGY_MODEL = (
    "E = P_static*gpus*t + e_flop(precision)*FLOPs + e_hbm*HBM bytes + e_link*link bytes; "
    "e_flop calibrated so a compute-bound GPU at its default efficiency draws its TDP"
)


@dataclass(frozen=True)
class ReplayResult:
    calls: pl.DataFrame  # one row per call: trace keys, token counts, per-stage columns
    stages: pl.DataFrame  # one row per stage
    footprint: pl.DataFrame  # component, bytes_per_gpu
    summary: dict


def _kv_frame(kv, n: int):
    if kv is None:
        return None
    per_call = getattr(kv, "per_call", kv)
    height = per_call.height if hasattr(per_call, "height") else len(next(iter(per_call.values())))
    if height != n:
        raise InputError(
            "<kv tiers>", f"expected {n} per-call rows (one per trace call), got {height}"
        )
    return per_call


def _col(calls, name: str, default=None):
    if hasattr(calls, "columns"):
        if name not in calls.columns:
            return default
        return calls.get_column(name).to_numpy().astype(np.float64, copy=False)
    if name not in calls:
        return default
    return np.asarray(calls[name], dtype=np.float64)


CALL_COLUMNS = (
    *(f"{st}_{k}" for st in STAGES for k in CALL_KEYS),
    "ttft_s",
    "decode_latency_s",
    "total_energy_j",
)


def price_calls(
    cfg: ServingConfig, calls, kv=None, columns=CALL_COLUMNS
) -> tuple[np.ndarray, np.ndarray]:
    """Per-call ``columns`` (rows, of ``CALL_COLUMNS``, in that order) and stage totals
    (stage × ``KEYS``, of every column whichever are kept).

    Fills are packed into forward passes of ``prefill_chunk_tokens`` tokens with other fills,
    as a loaded fill pool runs them, so a call bears new/chunk of each pass's weight load;
    ttft_s prices the fill alone. Decode shares each step among ``decode_batch`` sequences.
    ``kv`` (per-call arrays from agentx.kv, optional): kv_recompute_tokens move from the
    reused prefix to the filled tokens (a call whose whole prefix is lost becomes a prefill);
    kv_transfer_time_s and kv_transfer_energy_j (reloads from DRAM/SSD) join the call's fill.
    """
    from agentx.replay.kernel import params, price

    n = np.ascontiguousarray(_col(calls, "new_tokens"))
    p = np.ascontiguousarray(_col(calls, "reused_prefix_tokens"))
    out = np.ascontiguousarray(_col(calls, "output_tokens"))
    xt = xe = np.zeros(0)
    if kv is not None:
        rec = _col(kv, "kv_recompute_tokens")
        if rec is not None:
            rec = np.minimum(rec, p)
            n, p = n + rec, p - rec
        xt = np.broadcast_to(_col(kv, "kv_transfer_time_s", 0.0), n.shape).astype(np.float64)
        xe = np.broadcast_to(_col(kv, "kv_transfer_energy_j", 0.0), n.shape).astype(np.float64)
    q, dtab, exp_tok = params(cfg)
    keep = [CALL_COLUMNS.index(c) for c in columns]
    cols, sums = price(q, dtab, exp_tok, n, p, out, xt, xe, keep)
    return cols, sums.sum(axis=0)


def call_frame(cfg: ServingConfig, calls, kv=None) -> pl.DataFrame:
    """The per-stage and latency columns of ``calls`` (see ``agentx.replay.stages.call_costs``)."""
    cols, _ = price_calls(cfg, calls, kv)
    return pl.DataFrame(dict(zip(CALL_COLUMNS, cols, strict=True)))


@dataclass(frozen=True)
class Partial:
    """The priced calls of one partition and what the run summary needs of them.

    ``calls`` holds the per-call rows (trace keys, ``CALL_COLUMNS``, ``kv_*`` when given) in
    the partition's row order; ``Partial.slim`` keeps only the columns ``merge_partials``
    reads (``SLIM_COLUMNS``), so a streaming driver can write the rows and drop the rest.
    """

    calls: pl.DataFrame
    sums: np.ndarray  # stage × KEYS totals (float64)
    sessions: int  # distinct session_id values of the partition
    tokens: dict[str, int]  # sums of input, reused_prefix, new and output tokens
    over_context: int  # calls whose input + output tokens pass the model's max context

    def slim(self) -> Partial:
        # priced columns are copied: one can be a view of the kernel's whole (stages × calls)
        # array, which a zero-copy select would keep alive for every partition; trace columns
        # are kept as they are (slices of the trace's own columns: no second copy of them)
        cols = {
            c: self.calls.get_column(c)
            if c in TRACE_COLUMNS
            else np.array(self.calls.get_column(c).to_numpy())
            for c in SLIM_COLUMNS
        }
        return replace(self, calls=pl.DataFrame(cols))


SLIM_COLUMNS = ("t_start_s", "input_tokens", "output_tokens", "ttft_s", "decode_latency_s")


def priced_columns(wanted=None) -> tuple[str, ...]:
    """The ``CALL_COLUMNS`` among ``wanted`` (None: all), in their order, with the two
    latencies the merge reads always kept: a replay writing ``--calls summary`` prices no
    per-call FLOPs or bytes (12 of the 23 rows: 96 MB per million calls not made)."""
    if wanted is None:
        return CALL_COLUMNS
    wanted = set(wanted) | set(LATENCY)
    return tuple(c for c in CALL_COLUMNS if c in wanted)


def replay_partition(
    calls: pl.DataFrame, cfg: ServingConfig, kv_calls=None, columns=CALL_COLUMNS
) -> Partial:
    """Price one partition of a trace: the seam every engine (local streaming, Ray) calls.

    Pure function of its arguments. ``calls``: canonical trace rows (at least
    ``TRACE_COLUMNS``); ``cfg``: the resolved serving configuration; ``kv_calls``: optional
    per-call KV outcome (``agentx.kv`` ``PER_CALL`` columns, one row per row of ``calls``, same
    order), e.g. ``replay_tiers(...).per_call`` or a slice of it. A partition must hold every
    call of its sessions (sessions are counted per partition), and partitions in trace order
    reproduce ``replay_trace`` of the whole trace: integers exactly, float sums to rounding
    (docs/metrics.md). Combine partitions with ``merge_partials``. ``columns``: the priced
    columns the rows keep (``priced_columns``; the stage sums cover all of them anyway).
    """
    kv_calls = _kv_frame(kv_calls, calls.height)
    columns = priced_columns(columns)
    cols, sums = price_calls(cfg, calls, kv_calls, columns)
    frame = pl.DataFrame(dict(zip(columns, cols, strict=True)))
    parts = [calls.select([c for c in TRACE_COLUMNS if c in calls.columns]), frame]
    if isinstance(kv_calls, pl.DataFrame):
        # the tier outcome of each call travels with its costs (docs/metrics.md, kv_* columns)
        parts.append(kv_calls.select([c for c in kv_calls.columns if c.startswith("kv_")]))
    ctx = calls.get_column("input_tokens") + calls.get_column("output_tokens")
    return Partial(
        calls=pl.concat(parts, how="horizontal"),
        sums=sums,
        sessions=int(calls.get_column("session_id").n_unique()) if calls.height else 0,
        tokens={c: int(calls.get_column(c).sum()) for c in TRACE_COLUMNS[4:]},
        over_context=int((ctx > cfg.model.max_context_tokens).sum()),
    )


def merge_partials(parts, cfg: ServingConfig, kv_summary=None, arrivals=None) -> ReplayResult:
    """One ``ReplayResult`` from the partials of disjoint partitions, in the order given.

    Per-call rows are concatenated (slim partials give a calls table of ``SLIM_COLUMNS``
    only); stage sums, token counts and sessions add; latency quantiles and the HBM peak
    (``resident_context``) are computed over all calls together, so they are exact.
    ``kv_summary`` may be a function, called once every partial was taken (a summary whose
    sums come with the partitions, agentx/kv/rows.py). ``arrivals``: a function giving
    ``timeline.arrivals`` of the concatenated rows, made beforehand (or None).
    """
    check_fits(cfg)  # before a lazy ``parts`` starts pricing (or writing)
    parts = list(parts)
    if callable(kv_summary):
        kv_summary = kv_summary()
    calls = pl.concat([p.calls for p in parts], how="vertical") if parts else None
    sums = np.zeros((len(STAGES), len(KEYS)))
    for p in parts:
        sums += p.sums
    if calls is None:
        calls = replay_partition(_empty_calls(), cfg).calls
    # one contiguous float array per column: the peak and the quantiles read whole columns
    ttft, decode = (
        np.ascontiguousarray(calls.get_column(c).to_numpy(), np.float64) for c in LATENCY
    )
    # ... which the calls table then shares (the partitions' pieces go: 16 B a call)
    calls = calls.with_columns(
        pl.Series(c, a) for c, a in zip(LATENCY, (ttft, decode), strict=True)
    )
    totals = Totals(
        calls=calls.height,
        sums=sums,
        tokens={c: sum(p.tokens[c] for p in parts) for c in TRACE_COLUMNS[4:]},
        sessions=sum(p.sessions for p in parts),
        over_context=sum(p.over_context for p in parts),
    )
    # the quantiles (np.partition lets go of the GIL) run beside the HBM peak's sorts
    with ThreadPoolExecutor(max_workers=1) as pool:
        latency_f = pool.submit(
            lambda: {
                c: dict(zip(("p50", "p90", "p99"), quantiles(a, QUANTILES), strict=True))
                for c, a in zip(LATENCY, (ttft, decode), strict=True)
            }
        )
        arrived = arrivals() if arrivals is not None else None
        resident = resident_context(calls, ttft + decode, cfg.decode_batch, arrived, reuse=True)
    return replay_result(calls, cfg, totals, latency_f.result(), resident, kv_summary)


@dataclass
class Totals:
    """What the partials of a replay add up to (``merge_partials``, streamed replays)."""

    calls: int
    sums: np.ndarray  # stage × KEYS
    tokens: dict[str, int]
    sessions: int
    over_context: int


def replay_result(calls, cfg, totals: Totals, latency, resident, kv_summary) -> ReplayResult:
    """The stage table, footprint and summary of a replay from its totals, latency quantiles
    and resident KV peak ``(tokens, sequences)``; ``calls`` is passed through."""
    sums, tokens, n = totals.sums, totals.tokens, totals.calls
    stage_totals = {
        st: {k: float(sums[i, j]) for j, k in enumerate(KEYS)} for i, st in enumerate(STAGES)
    }
    t_all = sum(v["time_s"] for v in stage_totals.values())
    e_all = sum(v["energy_j"] for v in stage_totals.values())
    out_tokens = float(tokens["output_tokens"])
    for v in stage_totals.values():
        v["arithmetic_intensity"] = v["flops"] / v["hbm_bytes"] if v["hbm_bytes"] > 0 else 0.0
        v["time_share"] = v["time_s"] / t_all if t_all > 0 else 0.0
        v["energy_share"] = v["energy_j"] / e_all if e_all > 0 else 0.0
        v["j_per_output_token"] = v["energy_j"] / out_tokens if out_tokens > 0 else 0.0
    stage_df = pl.DataFrame([{"stage": st, **stage_totals[st]} for st in STAGES])
    tokens_res, seqs = resident
    fp = footprint_per_gpu(cfg, tokens_res, sequences=seqs or None)
    fp_df = pl.DataFrame(fp.as_rows())
    coef = coefficients(cfg)
    summary = {
        "system": cfg.system.name,
        "model": cfg.model.name,
        "layout": describe(cfg),
        "gpus": cfg.gpus,
        "decode_batch": cfg.decode_batch,
        "calls": n,
        "sessions": totals.sessions,
        "tokens": tokens,
        "stages": stage_totals,
        "total_time_s": t_all,
        "total_energy_j": e_all,
        "j_per_output_token": e_all / out_tokens if out_tokens > 0 else 0.0,
        "average_power_w_per_gpu": e_all / (t_all * cfg.gpus) if t_all > 0 else 0.0,
        "latency_s": latency,
        "hbm_peak_bytes_per_gpu": fp.total_bytes,
        "hbm_capacity_bytes_per_gpu": fp.capacity_bytes,
        "kv_fits_in_hbm": fp.fits,
        "kv_resident_tokens": tokens_res,
        "calls_over_max_context": totals.over_context,
        "kv_resident_sequences": seqs,
        "footprint": {r["component"]: r["bytes_per_gpu"] for r in fp.as_rows()},
        "energy_model": ENERGY_MODEL
        if coef.calibrated
        else ENERGY_MODEL + " (no TDP published: fallback pJ/FLOP, no static power)",
    }
    if kv_summary is not None:
        summary["kv_tiers"] = kv_summary
    return ReplayResult(calls, stage_df, fp_df, summary)


def replay_trace(trace, cfg: ServingConfig, kv=None) -> ReplayResult:
    """Price every call of ``trace`` (a Trace or a calls frame) on ``cfg``; ``kv`` is an
    optional ``agentx.kv`` result whose per-call reloads and recomputes enter the fills.
    One partition through the seam (``replay_partition`` then ``merge_partials``)."""
    check_fits(cfg)
    df = trace.calls if hasattr(trace, "calls") else trace
    part = replay_partition(df, cfg, kv)
    return merge_partials([part], cfg, getattr(kv, "summary", None) if kv is not None else None)


def _empty_calls() -> pl.DataFrame:
    ints = ("call_index", *TRACE_COLUMNS[4:])
    return pl.DataFrame(
        schema={
            c: pl.String
            if c in ("session_id", "agent_id")
            else pl.Int64
            if c in ints
            else pl.Float64
            for c in TRACE_COLUMNS
        }
    )


# the calls.parquet side of the streaming driver (kept importable from here; its partitions:
# agentx.replay.chunks)
from agentx.replay.callsfile import CALLS_MODES, calls_columns, write_calls  # noqa: E402, F401
