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
    )


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
    return {
        "decode_batch": b,
        "decode_iteration_s": t_d,
        "mixed_iteration_s": t_mix,
        "tpot_s": t_d + b * shape.new_tokens * c_p / shape.output_tokens,
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
