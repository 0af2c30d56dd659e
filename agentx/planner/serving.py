"""Steady-state in-flight batching for an agentic trace: the planner's serving model.

Built on ``agentx.serving.iteration`` (one engine iteration over a mixed batch of decodes and
a prefill chunk, with tile padding, EP imbalance and pipeline latency). An instance runs ``B``
decoding sequences; every call of the trace brings ``n̄`` new tokens to fill onto a cached
prefix ``P̄`` and ``m̄`` output tokens (the trace's means). Per output token the engine spends
one decode iteration ``t_d(B)`` shared by B sequences, plus the prefill work the calls bring,
``n̄ / m̄`` prompt tokens at the chunk's marginal cost ``c_p = (t_mix − t_d) / chunk``:

* calls per second an instance serves at batch B: ``X = B / (m̄·t_d + B·n̄·c_p)``;
* time per output token a user sees: ``TPOT = t_d / (1 − ρ)`` with the prefill share
  ``ρ = X·n̄·c_p``, i.e. ``TPOT = t_d + B·n̄·c_p / m̄`` (the chunks interleaved between two of
  a sequence's tokens);
* time to first token of a call with ``n`` new tokens at ``λ`` calls/s per instance: half a
  running iteration, the M/D/1 wait for the prefill budget (Pollaczek-Khinchine, utilisation
  ``u = λ·n̄·t_mix / chunk``) and its own ``⌈n / chunk⌉`` mixed passes — the same terms as
  ``agentx.serving.steady``, with the trace's prefix reuse instead of random prompts.

A call's time per token depends on the contexts decoding beside it: the iteration reads the KV
of every sequence in the batch, so its time follows the batch's mean context. The p99 over calls
uses the spread of the trace's per-call decode contexts ``c = S₀ + m/2``: the batch mean of B
contexts has p99 ``μ + (c₉₉ − μ)/√B`` (exact at B = 1, the central-limit rate for large B).

Disaggregated serving (``disaggregated_points``) follows ``agentx.serving.steady``'s
disaggregated path: the decode pool never carries prefill chunks (``TPOT = t_d``), the prefill
pool is an M/D/1 server of its chunk throughput, and each call's KV (its whole context) moves
to the decode pool over the scale-up link when one domain holds both pools, else scale-out.

Every quantity is a numpy array over B (no loop over calls or batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class TraceShape:
    """What the serving model needs from a trace: per-call means and the TTFT tail."""

    new_tokens: float  # n̄
    prefix_tokens: float  # P̄
    output_tokens: float  # m̄
    decode_context_tokens: float  # output-weighted mean context a decode step sees
    new_tokens_p99: float
    decode_context_p99_tokens: float = 0.0  # p99 over calls of a call's mean decode context


def trace_shape(calls: pl.DataFrame) -> TraceShape:
    from agentx.replay.interactivity import decode_context_tokens

    def mean(c: str) -> float:
        return float(calls.get_column(c).mean() or 0.0)

    return TraceShape(
        new_tokens=max(mean("new_tokens"), 1.0),
        prefix_tokens=mean("reused_prefix_tokens"),
        output_tokens=max(mean("output_tokens"), 1.0),
        decode_context_tokens=max(decode_context_tokens(calls), 1.0),
        new_tokens_p99=float(calls.get_column("new_tokens").quantile(0.99) or 1.0),
        decode_context_p99_tokens=float(
            (calls.get_column("input_tokens") + calls.get_column("output_tokens") / 2.0).quantile(
                0.99
            )
            or 0.0
        ),
    )


def batch_context_p99_tokens(shape: TraceShape, b) -> np.ndarray:
    """p99 of the mean decode context of a batch of ``b`` calls (module docstring)."""
    mu = shape.decode_context_tokens
    spread = max(shape.decode_context_p99_tokens - mu, 0.0)
    return mu + spread / np.sqrt(np.maximum(np.asarray(b, dtype=np.float64), 1.0))


def _mixed(cfg, b, shape: TraceShape, chunk: float):
    from agentx.serving.iteration import iteration_time_s

    ctx = shape.decode_context_tokens
    t_d = iteration_time_s(cfg, b, ctx)
    t_mix = iteration_time_s(cfg, b, ctx, chunk, shape.prefix_tokens, 1.0)
    return t_d, t_mix


def operating_points(cfg, shape: TraceShape, batches) -> dict[str, np.ndarray]:
    """Per decode batch B: decode iteration, TPOT, calls/s and output tokens/s per instance."""
    b = np.asarray(batches, dtype=np.float64)
    chunk = min(float(cfg.prefill_chunk_tokens), shape.new_tokens)
    t_d, t_mix = _mixed(cfg, b, shape, chunk)
    c_p = np.maximum(t_mix - t_d, 0.0) / chunk
    per_call_s = shape.output_tokens * t_d + b * shape.new_tokens * c_p
    x = b / per_call_s
    interleave = b * shape.new_tokens * c_p / shape.output_tokens
    return {
        "decode_batch": b,
        "decode_iteration_s": t_d,
        "mixed_iteration_s": t_mix,
        "tpot_s": t_d + interleave,
        "tpot_p99_s": _decode_p99_s(cfg, b, shape) + interleave,
        "calls_per_s": x,
        "output_tok_s": x * shape.output_tokens,
    }


def ttft_s(cfg, shape: TraceShape, batch: float, calls_per_s: float, new_tokens: float) -> float:
    """Time to first token of a call with ``new_tokens`` at ``calls_per_s`` per instance."""
    chunk = min(float(cfg.prefill_chunk_tokens), shape.new_tokens)
    t_d, t_mix = (float(v[0]) for v in _mixed(cfg, [batch], shape, chunk))
    u = min(calls_per_s * shape.new_tokens * t_mix / chunk, 0.98)
    svc_mean = max(1.0, shape.new_tokens / chunk) * t_mix
    # the call's own prompt runs in chunks of up to the engine's budget
    own_chunk = min(float(cfg.prefill_chunk_tokens), max(new_tokens, 1.0))
    own_mix = float(_mixed(cfg, [batch], shape, own_chunk)[1][0])
    own = np.ceil(max(new_tokens, 1.0) / own_chunk) * own_mix
    overhead = cfg.system.calibrated_request_overhead_s
    return float(t_d / 2.0 + u / (2.0 * (1.0 - u)) * svc_mean + own + overhead)


def _decode_p99_s(cfg, b, shape: TraceShape) -> np.ndarray:
    from agentx.serving.iteration import iteration_time_s

    return np.maximum(
        iteration_time_s(cfg, b, batch_context_p99_tokens(shape, b)),
        iteration_time_s(cfg, b, shape.decode_context_tokens),
    )


def disaggregated_points(prefill_cfg, decode_cfg, shape: TraceShape, batches) -> dict:
    """Per decode batch B of the decode pool: its TPOT (mean and p99), calls/s per decode
    instance, and the prefill instance's calls/s, chunk time and the KV transfer per call."""
    from agentx.serving.iteration import iteration_time_s

    b = np.asarray(batches, dtype=np.float64)
    t_d = iteration_time_s(decode_cfg, b, shape.decode_context_tokens)
    x = b / (shape.output_tokens * t_d)
    chunk = min(float(prefill_cfg.prefill_chunk_tokens), shape.new_tokens)
    t_chunk = float(iteration_time_s(prefill_cfg, 0.0, 0.0, chunk, shape.prefix_tokens, 1.0))
    sysm = decode_cfg.system
    link = (
        sysm.scale_up_bytes_per_s
        if sysm.scale_up_domain_gpus >= prefill_cfg.gpus + decode_cfg.gpus
        else sysm.scale_out_bytes_per_s
    )
    kv_bytes = (shape.prefix_tokens + shape.new_tokens) * decode_cfg.kv_bytes_per_token
    return {
        "decode_batch": b,
        "decode_iteration_s": t_d,
        "tpot_s": t_d,
        "tpot_p99_s": _decode_p99_s(decode_cfg, b, shape),
        "calls_per_s": x,
        "output_tok_s": x * shape.output_tokens,
        "prefill_calls_per_s": chunk / t_chunk / shape.new_tokens,
        "chunk_s": t_chunk,
        # every GPU of the prefill instance sends its share of the KV in parallel
        "kv_transfer_s": kv_bytes
        / (prefill_cfg.gpus * link * decode_cfg.efficiencies.communication),
    }


def disaggregated_ttft_s(prefill_cfg, shape: TraceShape, pts: dict, calls_per_s, new_tokens):
    """TTFT of a call with ``new_tokens`` when each prefill instance gets ``calls_per_s``
    (arrays broadcast): M/D/1 wait for the chunk budget, its own chunks, the KV transfer, the
    first decode iteration and the calibrated overhead."""
    from agentx.serving.iteration import iteration_time_s

    chunk = min(float(prefill_cfg.prefill_chunk_tokens), shape.new_tokens)
    t_chunk = pts["chunk_s"]
    u = np.minimum(np.asarray(calls_per_s) * shape.new_tokens * t_chunk / chunk, 0.98)
    svc_mean = max(1.0, shape.new_tokens / chunk) * t_chunk
    own_chunk = min(float(prefill_cfg.prefill_chunk_tokens), max(new_tokens, 1.0))
    own_t = float(iteration_time_s(prefill_cfg, 0.0, 0.0, own_chunk, shape.prefix_tokens, 1.0))
    own = np.ceil(max(new_tokens, 1.0) / own_chunk) * own_t
    return (
        u / (2.0 * (1.0 - u)) * svc_mean
        + own
        + pts["kv_transfer_s"]
        + float(np.asarray(pts["decode_iteration_s"]).ravel()[0])
        + prefill_cfg.system.calibrated_request_overhead_s
    )
