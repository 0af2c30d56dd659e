"""Decode batch from a target interactivity (issue 3: "decode batch or target interactivity").

A user states how fast each user must see tokens (tokens/s per user); the largest decode batch
whose step time meets it, and whose resident KV still fits in HBM, is the operating point.
Step times come from the same closed forms as the replay (``agentx.replay.stages``), evaluated
for every candidate batch at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.errors import UsageError
from agentx.replay.footprint import max_resident_tokens
from agentx.replay.stages import _floor_per_pass, decode_attention_step, decode_experts_step

MAX_BATCH = 8192  # candidates 1..MAX_BATCH sequences per decode step of the instance


def decode_step_time_s(cfg: ServingConfig, batch, context_tokens: float) -> np.ndarray:
    """Time between two tokens of one sequence (attention + experts) for each batch size.

    The stage closed forms give instance-seconds (work spread over every GPU). A token,
    though, crosses every pipeline stage in turn: with ``pp`` stages the batch runs as ``pp``
    micro-batches, each stage does 1/pp of the layers on gpus/pp GPUs, so a token waits
    ``pp × T(batch/pp)`` (micro-batches of at least one sequence) (kernel floors once: each layer is crossed once). Weights are read
    once per micro-batch, so at a fixed batch more stages never make a step shorter.
    """
    pp = float(cfg.pp)
    batch = np.asarray(batch, dtype=np.float64)
    b = batch / np.clip(batch, 1.0, pp)  # micro-batches of at least one sequence
    att = decode_attention_step(cfg, b, b * float(context_tokens))
    exp = decode_experts_step(cfg, b)
    floors = sum(_floor_per_pass(cfg))
    return np.asarray(pp * (att["time_s"] + exp["time_s"] - floors) + floors, dtype=np.float64)


def batch_for_interactivity(
    cfg: ServingConfig, tokens_per_s_per_user: float, context_tokens: float
) -> tuple[int, dict]:
    """Largest decode batch meeting ``tokens_per_s_per_user`` at ``context_tokens`` per sequence.

    Also capped by the sequences whose KV (double-buffered) fits in the HBM left after weights.
    Returns the batch and a JSON-able record of why (for summary.json).
    """
    if not tokens_per_s_per_user > 0:
        raise UsageError(
            f"--interactivity must be > 0 tokens/s per user, got {tokens_per_s_per_user}"
        )
    if not context_tokens > 0:
        raise UsageError(f"decode context must be > 0 tokens, got {context_tokens}")
    batch = np.arange(1, MAX_BATCH + 1, dtype=np.float64)
    step_s = decode_step_time_s(cfg, batch, context_tokens)
    meets = step_s <= 1.0 / tokens_per_s_per_user
    kv_cap = int(max_resident_tokens(cfg) // context_tokens)
    fits = batch <= kv_cap
    ok = meets & fits
    if not meets[0]:
        best = 1.0 / float(step_s[0])
        raise UsageError(
            f"--interactivity {tokens_per_s_per_user:g} tokens/s per user is out of reach: "
            f"one sequence at {context_tokens:,.0f} tokens decodes at {best:,.1f} tokens/s on {cfg.gpus} × {cfg.system.name}"
        )
    chosen = int(batch[ok].max()) if ok.any() else 1
    if chosen == MAX_BATCH:
        limit = "max_batch"
    elif chosen < MAX_BATCH and meets[chosen] and not fits[chosen]:
        limit = "hbm"  # the next batch would still be fast enough, but its KV would not fit
    else:
        limit = "interactivity"
    record = {
        "target_tokens_per_s_per_user": tokens_per_s_per_user,
        "context_tokens": float(context_tokens),
        "decode_batch": chosen,
        "limited_by": limit,
        "kv_capacity_sequences": kv_cap,
        "step_time_s": float(step_s[chosen - 1]),
        "tokens_per_s_per_user": 1.0 / float(step_s[chosen - 1]),
    }
    return chosen, record


def decode_context_tokens(calls) -> float:
    """Mean context a decode step sees in ``calls``, weighted by output tokens: Σ m·(S₀ + m/2) / Σ m."""
    m = calls.get_column("output_tokens").to_numpy().astype(np.float64)
    s0 = calls.get_column("input_tokens").to_numpy().astype(np.float64)
    total = m.sum()
    return (
        float((m * (s0 + m / 2.0)).sum() / total)
        if total > 0
        else float(s0.mean() if s0.size else 0.0)
    )


def with_interactivity(cfg: ServingConfig, tokens_per_s_per_user: float, context_tokens: float):
    """``cfg`` with its decode batch set by :func:`batch_for_interactivity`."""
    batch, record = batch_for_interactivity(cfg, tokens_per_s_per_user, context_tokens)
    return dataclasses.replace(cfg, decode_batch=batch), record
