"""Replay a trace through the cost model: per-call, per-stage and footprint tables + summary.

``replay_trace`` is the library behind ``agentx replay``. It prices every call with the closed
forms of ``agentx.replay.stages`` (one pass over whole columns), sums the stages, and sizes
the per-GPU HBM footprint with the resident KV of a full decode batch. Column meanings,
units and formulas: docs/metrics.md.

This module owns the partition seam (``Partial``, ``replay_partition``, ``merge_partials``)
and ``replay_trace``; the columns and per-call pricing live in ``agentx.replay.pricing``, the
tables and summary from totals in ``agentx.replay.result``, both re-exported here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from agentx.catalog.types import ServingConfig
from agentx.replay.footprint import check_fits

# The columns and the per-call pricing (agentx.replay.pricing), the tables and summary from
# totals (agentx.replay.result): re-exported, every name importable from here as before.
from agentx.replay.pricing import (
    CALL_COLUMNS,
    CALL_KEYS,
    KV_COLUMNS,
    LATENCY,
    TRACE_COLUMNS,
    _kv_frame,
    call_frame,
    price_calls,
    priced_columns,
)
from agentx.replay.result import ENERGY_MODEL, ReplayResult, Totals, replay_result
from agentx.replay.stages import KEYS, STAGES
from agentx.replay.timeline import QUANTILES, quantiles, resident_context

__all__ = [
    "CALLS_MODES",
    "CALL_COLUMNS",
    "CALL_KEYS",
    "ENERGY_MODEL",
    "KV_COLUMNS",
    "LATENCY",
    "SLIM_COLUMNS",
    "TRACE_COLUMNS",
    "Partial",
    "ReplayResult",
    "Totals",
    "call_frame",
    "calls_columns",
    "merge_partials",
    "price_calls",
    "priced_columns",
    "replay_partition",
    "replay_result",
    "replay_trace",
    "resident_context",
    "write_calls",
]


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


def replay_partition(
    calls: pl.DataFrame, cfg: ServingConfig, kv_calls=None, columns=CALL_COLUMNS, parallel=True,
    into=None,
) -> Partial:  # fmt: skip
    """Price one partition of a trace: the seam every engine (local streaming, Ray) calls.

    Pure function of its arguments. ``calls``: canonical trace rows (at least
    ``TRACE_COLUMNS``); ``cfg``: the resolved serving configuration; ``kv_calls``: optional
    per-call KV outcome (``agentx.kv`` ``PER_CALL`` columns, one row per row of ``calls``, same
    order), e.g. ``replay_tiers(...).per_call`` or a slice of it. A partition must hold every
    call of its sessions (sessions are counted per partition), and partitions in trace order
    reproduce ``replay_trace`` of the whole trace: integers exactly, float sums to rounding
    (docs/metrics.md). Combine partitions with ``merge_partials``. ``columns``: the priced
    columns the rows keep (``priced_columns``; the stage sums cover all of them anyway).
    ``parallel``: False where a writer thread needs the second core (``replay.kernel.kernel_for``).
    ``into``: memory for the priced columns (``replay.kernel.price``), which the rows then
    refer to (a driver that recycles it: ``agentx.replay.chunks``).
    """
    kv_calls = _kv_frame(kv_calls, calls.height)
    columns = priced_columns(columns)
    cols, sums = price_calls(cfg, calls, kv_calls, columns, parallel, into)
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
    # the latencies as the partitions' pieces (views, no copy): the quantiles copy them once
    # into their working array, and the HBM peak adds them into its busy times; whole-column
    # copies first were 0.1 s of a 10 M-call replay's last phase
    ttft, decode = (_pieces(calls.get_column(c)) for c in LATENCY)
    if [t.size for t in ttft] != [d.size for d in decode]:  # pieces that do not line up
        ttft, decode = [np.concatenate(ttft)], [np.concatenate(decode)]
    busy = np.empty(calls.height)
    at = 0
    for t, d in zip(ttft, decode, strict=True):
        np.add(t, d, out=busy[at : at + t.size])
        at += t.size
    totals = Totals(
        calls=calls.height,
        sums=sums,
        tokens={c: sum(p.tokens[c] for p in parts) for c in TRACE_COLUMNS[4:]},
        sessions=sum(p.sessions for p in parts),
        over_context=sum(p.over_context for p in parts),
    )
    # the quantiles (np.partition lets go of the GIL) run beside the HBM peak's sorts
    # (two workers: one takes the quantiles, the other half of the sort of finish times)
    with ThreadPoolExecutor(max_workers=2) as pool:
        latency_f = pool.submit(
            lambda: {
                c: dict(zip(("p50", "p90", "p99"), quantiles(a, QUANTILES), strict=True))
                for c, a in zip(LATENCY, (ttft, decode), strict=True)
            }
        )
        arrived = arrivals() if arrivals is not None else None
        resident = resident_context(calls, busy, cfg.decode_batch, arrived, reuse=True, pool=pool)
    return replay_result(calls, cfg, totals, latency_f.result(), resident, kv_summary)


def _pieces(s: pl.Series) -> list[np.ndarray]:
    """A float column's chunks as float64 arrays (views where they are such already)."""
    return [np.asarray(c.to_numpy(), np.float64) for c in s.get_chunks()]


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
