"""Trace transforms a capacity planner needs before pricing: scale the load, respect the context.

``scale_load`` multiplies the offered load by K by **replicating sessions** with fresh ids
(K = 2.5: every session twice more, plus every second session once more), not by compressing
time. An agent's calls are spaced by its own think and tool time and by the model's previous
answer; dividing every timestamp by K would shrink those gaps below the response time the
trace itself implies, reorder a session's calls against its own answers and change what each
call reuses. More users running the same kind of sessions is what growing traffic is, so
copies keep every session's own timing and are shifted by a fraction of the mean gap between
session arrivals, so copies interleave instead of arriving in lock-step. Copies get fresh
session ids: with session-scoped block hashes their KV never matches the original's.

``fit_context`` handles calls whose context (input + output tokens) passes the model's
limit: ``compact`` replays what agents do (SEED-6, the synthesizer's compaction model,
``agentx.traces.synth``): at the first call that would pass the limit the prompt restarts
from the shared tool + system prefix plus a summary (``SynthParams.summary_tokens_p50``), and
every later call of that agent is shorter by the tokens removed; ``drop`` removes those
calls; ``error`` stops with the first one. The one sequential step (whether call k compacts
depends on what call k-1 left) is a small numba kernel over the calls in stream order.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import polars as pl

from agentx.errors import InputError, UsageError
from agentx.traces import schema as S
from agentx.traces.io import Trace
from agentx.traces.synth_params import SynthParams

OVER_CONTEXT = ("compact", "drop", "error", "warn")


def scale_load(trace: Trace, k: float) -> Trace:
    """``trace`` with its load multiplied by ``k`` > 0 (see the module docstring: replication)."""
    if not (k > 0 and math.isfinite(k)):
        raise UsageError(f"--load-scale must be a positive number, got {k:g}")
    if k == 1:
        return trace
    df = trace.calls
    ids = df.get_column("session_id").unique(maintain_order=False).sort()
    n = ids.len()
    if n == 0:
        return trace
    starts = df.group_by("session_id").agg(pl.col("t_start_s").min()).get_column("t_start_s")
    span = float(starts.max() - starts.min()) if n > 1 else 0.0
    gap = span / n  # mean gap between session arrivals
    whole, frac = int(math.floor(k)), k - math.floor(k)
    copies = math.ceil(k)
    rank = np.arange(n, dtype=np.float64)
    parts = []
    for j in range(copies):
        if j < whole:
            keep = ids
        else:  # the fractional copy: an evenly spread share ``frac`` of the sessions
            # the 1e-9 keeps a k one ulp under an integer (1.9999999999999996) from losing a session
            share = np.floor((rank + 1) * frac + 1e-9) > np.floor(rank * frac + 1e-9)
            keep = ids.filter(pl.Series(share))
        part = df.filter(pl.col("session_id").is_in(keep.implode()))
        if j > 0:
            part = part.with_columns(
                session_id=pl.col("session_id") + f"~x{j}",
                t_start_s=pl.col("t_start_s") + gap * j / copies,
            )
        parts.append(part)
    # rows stay grouped by session in call order (the schema's invariant); copies follow
    return Trace(pl.concat(parts), dict(trace.meta))


def over_context(calls: pl.DataFrame, limit_tokens: int) -> pl.Series:
    """Which calls' context (input + output tokens) passes ``limit_tokens``."""
    return (calls.get_column("input_tokens") + calls.get_column("output_tokens")) > limit_tokens


def fit_context(trace: Trace, limit_tokens: int, mode: str = "warn") -> tuple[Trace, dict]:
    """``trace`` with calls over ``limit_tokens`` handled by ``mode`` (see module docstring).

    Returns the trace and a record: calls over the limit before and after, compactions added,
    calls dropped. ``warn`` leaves the trace as it is (the caller prints the count).
    """
    if mode not in OVER_CONTEXT:
        raise UsageError(f"--over-context must be one of {', '.join(OVER_CONTEXT)}, got '{mode}'")
    df = trace.calls
    over = over_context(df, limit_tokens)
    n_over = int(over.sum())
    rec = {"limit_tokens": int(limit_tokens), "calls_over": n_over, "mode": mode}
    if n_over == 0 or mode == "warn":
        return trace, {**rec, "calls_over_after": n_over, "compactions": 0, "dropped": 0}
    if mode == "error":
        i = int(over.arg_true()[0])
        row = df.row(i, named=True)
        raise InputError(
            "<trace>",
            f"call {row['call_index']} of session {row['session_id']} needs "
            f"{row['input_tokens'] + row['output_tokens']:,} tokens of context, more than the "
            f"model's {limit_tokens:,} (use --over-context compact or drop)",
            row=i,
            field="input_tokens",
        )
    if mode == "drop":
        # the calls left keep their order; call_index is renumbered to stay contiguous
        out = df.filter(~over).with_columns(
            call_index=pl.int_range(pl.len()).over("session_id").cast(pl.Int64)
        )
        return Trace(out, dict(trace.meta)), {
            **rec,
            "calls_over_after": 0,
            "compactions": 0,
            "dropped": n_over,
        }
    return _compact(trace, limit_tokens, rec)


def _compact(trace: Trace, limit: int, rec: dict) -> tuple[Trace, dict]:
    df = trace.calls.with_row_index("_row")
    stream = pl.col("agent_id").fill_null("")
    ordered = df.sort("session_id", stream, "call_index", maintain_order=True)
    first = (
        ordered.select(
            (pl.struct("session_id", stream) != pl.struct("session_id", stream).shift(1)).fill_null(
                True
            )
        )
        .to_series()
        .to_numpy()
    )
    base = (
        ordered.get_column("shared_prefix_tokens").fill_null(0).to_numpy().astype(np.int64)
        if "shared_prefix_tokens" in ordered.columns
        else np.zeros(ordered.height, np.int64)
    )
    inp = ordered.get_column("input_tokens").to_numpy().astype(np.int64)
    reused = ordered.get_column("reused_prefix_tokens").to_numpy().astype(np.int64)
    out_tok = ordered.get_column("output_tokens").to_numpy().astype(np.int64)
    summary = int(SynthParams().summary_tokens_p50)
    inp2, reused2, comp = inp.copy(), reused.copy(), np.zeros(inp.size, np.bool_)
    _compact_kernel(first, inp, reused, out_tok, base, summary, limit, inp2, reused2, comp)
    rows = ordered.get_column("_row").to_numpy()
    new_cols = pl.DataFrame(
        {"_row": rows, "input_tokens": inp2, "reused_prefix_tokens": reused2, "_comp": comp}
    )
    out = (
        df.drop("input_tokens", "reused_prefix_tokens")
        .join(new_cols, on="_row", how="left")
        .sort("_row")
        .with_columns(new_tokens=pl.col("input_tokens") - pl.col("reused_prefix_tokens"))
    )
    if "is_compaction" in out.columns:
        out = out.with_columns(is_compaction=pl.col("is_compaction") | pl.col("_comp"))
    if "trigger" in out.columns:
        out = out.with_columns(
            trigger=pl.when(pl.col("_comp")).then(pl.lit("compaction")).otherwise(pl.col("trigger"))
        )
    meta = dict(trace.meta)
    n_comp = int(comp.sum())
    if n_comp and "block_hashes" in out.columns:
        # The rewritten contexts no longer match the recorded block hashes; the KV model then
        # works from the reused-prefix lengths instead (agentx.kv.blocks).
        out = out.with_columns(pl.lit(None, dtype=out.schema["block_hashes"]).alias("block_hashes"))
        meta[S.META_HASH_SCOPE] = "none"
    out = out.select(trace.calls.columns)
    after = int(over_context(out, limit).sum())
    return Trace(out, meta), {**rec, "calls_over_after": after, "compactions": n_comp, "dropped": 0}


@numba.njit(cache=True)
def _compact_kernel(
    first, inp, reused, out, base, summary, limit, inp_out, reused_out, comp_out
):  # pragma: no cover (compiled)
    removed = 0
    for i in range(inp.size):
        if first[i]:
            removed = 0
        if removed > 0 and reused[i] < removed:
            removed = 0  # this call does not extend the compacted history: it stands as recorded
        x = inp[i] - removed
        r = reused[i] - removed if removed > 0 else reused[i]
        if x + out[i] > limit:
            # compact: the prompt restarts from the shared prefix plus a summary (SEED-6)
            room = max(limit - out[i], 1)
            keep = min(base[i], room)
            new_x = min(keep + summary, room)
            removed += x - new_x
            x, r = new_x, keep
            comp_out[i] = True
        inp_out[i] = x
        reused_out[i] = min(max(r, 0), x)
