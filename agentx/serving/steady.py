"""Steady state of in-flight batching at a fixed closed-loop concurrency (the benchmark shape).

InferenceX / vLLM ``benchmark_serving`` runs ``C`` clients in a closed loop: each sends a
request of ISL random tokens (no prefix reuse), waits for all OSL output tokens, and sends
the next at once. Lengths are drawn uniformly in [r·L, L] (r = 0.8), so their means are
(1 + r)/2 · L. The engine (vLLM, SGLang, TRT-LLM) runs iterations over every running decode
plus up to ``prefill_chunk_tokens`` of prefill (chunked prefill), and admits a request only
when its KV fits.

The model solves the fixed point of (all vectorised over concurrency):

* admission: at most ``N_cap`` sequences hold KV (HBM left after weights, footprint model, at
  the mean context ISL + OSL/2); ``N = min(C, N_cap)`` run, the rest wait;
* decode: ``B`` of the running sequences decode each iteration (the others are in prefill);
  a decode-only iteration costs ``t_d = iteration_time_s(B, ISL + OSL/2)``;
* prefill interleaving: a mixed iteration with a chunk costs ``t_mix``; the chunk's marginal
  cost ``t_mix − t_d`` per ``chunk`` tokens is the engine time each prompt token steals from
  decoding, so with prefill load ``ρ = X·ISL·(t_mix − t_d)/chunk`` the time between two tokens
  of a sequence is ``TPOT = t_d / (1 − ρ) / accepted_tokens_per_step``;
* TTFT = admission wait (Little's law on the waiting clients, ``(C − N)/X``) + the residual of
  the running iteration (``t_d/2``) + the M/D/1 wait for the prefill budget
  (Pollaczek-Khinchine, utilisation ``X·ISL·t_mix/chunk``) + the prompt's own chunked passes;
* Little's law closes the loop: ``X = N / (TTFT_service + (OSL − 1)·TPOT)``.

Disaggregated serving runs prefill and decode on separate pools (``disaggregated_steady_state``):
the decode pool never carries prefill chunks, the prefill pool is an M/D/1 server of its
chunk throughput, and the KV moves between pools over the scale-out network (scale-up when
one NVLink domain holds both).

Speculative decoding / MTP (``Speculation``, off by default): a decode iteration verifies
``1 + d`` tokens per sequence and pays ``d`` one-layer MTP draft passes; per-token acceptance
``a`` yields ``(1 − a^(d+1)) / (1 − a)`` tokens per step (Leviathan et al. 2023, eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentx.catalog.types import ServingConfig
from agentx.replay.footprint import max_resident_tokens
from agentx.serving.iteration import iteration_cost, iteration_time_s

REQUESTS_PER_CLIENT = 10  # InferenceX num_prompts ≈ 10 × concurrency (measured/SOURCES.md)
RANGE_RATIO = 0.8  # InferenceX RANDOM_RANGE_RATIO (utils/bench_serving/benchmark_serving.py)
ITERATIONS = 24  # damped fixed-point sweeps; converged to 4 digits by 20 (tests/test_serving.py)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding / MTP: ``draft_tokens`` per step, per-token ``acceptance``."""

    draft_tokens: int = 0
    acceptance: float = 0.0

    @property
    def tokens_per_step(self) -> float:
        d, a = self.draft_tokens, self.acceptance
        if d <= 0:
            return 1.0
        if a >= 1.0:
            return float(d + 1)
        return (1.0 - a ** (d + 1)) / (1.0 - a)


def mean_length(nominal, range_ratio: float = RANGE_RATIO):
    """Mean of lengths drawn uniformly in [r·L, L]."""
    return np.asarray(nominal, dtype=np.float64) * (1.0 + range_ratio) / 2.0


def kv_capacity_sequences(cfg: ServingConfig, context_tokens, cap_tokens=None) -> np.ndarray:
    """Sequences whose KV at ``context_tokens`` fits in the HBM the weights leave free (or in an
    engine's pool of ``cap_tokens``, serving/recipes.engine_kv_tokens)."""
    cap = max_resident_tokens(cfg, double_buffer=False) if cap_tokens is None else cap_tokens
    return np.maximum(1.0, np.floor(cap / np.maximum(np.asarray(context_tokens, float), 1.0)))


def _passes(cfg: ServingConfig, b, ctx, spec: Speculation, chunk=None):
    """The decode step (a verify pass of ``1 + d`` tokens per sequence plus ``d`` one-layer
    MTP draft passes) of ``b`` sequences at context ``ctx``, the plain decode pass, and with
    ``chunk`` = (tokens, sequences) the decode pass that also carries that prefill chunk.

    One ``iteration_cost`` over the passes stacked on a new first axis: every operation in it
    is elementwise, so each pass is priced exactly as alone, for a third of the Python
    overhead (calibrate prices ~10^5 iterations, tests/test_validate.py)."""
    q = 1.0 + max(spec.draft_tokens, 0)
    rows = [(b, ctx, 0.0, 0.0, 1.0)]  # a plain decode pass (what a draft pass is a layer of)
    if q != 1.0:
        rows.append((b, ctx, 0.0, 0.0, q))
    if chunk is not None:
        rows.append((b, ctx, *chunk, 1.0))
    cols = np.empty((5, len(rows), *np.broadcast_shapes(*(np.shape(x) for r in rows for x in r))))
    for i, r in enumerate(rows):
        for j, x in enumerate(r):
            cols[j, i] = x
    got = iteration_cost(cfg, cols[0], cols[1], cols[2], 0.0, cols[3], cols[4])
    time_s = got["time_s"]
    t_d = time_s[1 if q != 1.0 else 0]
    if spec.draft_tokens > 0:
        one, floor = time_s[0], got["floor_s"][0]
        L = cfg.model.num_layers
        t_d = t_d + spec.draft_tokens * ((one - floor) / L + floor / L)
    return t_d, time_s[0], (time_s[-1] if chunk is not None else None)


def _decode_step(cfg, b, ctx, spec: Speculation):
    return _passes(cfg, b, ctx, spec)[0]


def steady_state(
    cfg: ServingConfig,
    concurrency,
    isl_tokens,
    osl_tokens,
    *,
    range_ratio: float = RANGE_RATIO,
    spec: Speculation | None = None,
    mixed_prefill: bool = True,
    kv_capacity_tokens: float | None = None,
    admission_interval_iters: float = 1.0,
    balance_ranks: int = 0,
    prefill_floor_s: float = 0.0,
) -> dict[str, np.ndarray]:
    """Aggregated (one pool) steady state; returns arrays over ``concurrency``:
    ``tpot_s, ttft_s, requests_per_s, output_tok_s, output_tok_s_per_gpu,
    output_tok_s_per_user, running, decode_batch, waiting, prefill_share``.

    ``mixed_prefill``: prefill chunks ride in the decode iterations (vLLM V1 chunked prefill,
    TRT-LLM in-flight batching), or run as prefill-only iterations while decodes wait
    (SGLang's default, ``--enable-mixed-chunk`` off): then a chunk costs a whole pass of its own,
    weights included.

    Engine settings (serving/recipes.py): requests join the batch every
    ``admission_interval_iters`` K iterations while others decode, so an arrival waits K·t_d/2;
    with ``balance_ranks`` r the cadence is min(K·t_d, r/X) (TRT-LLM attention-DP balance).
    Prompts admitted together share a prefill pass, which costs at least ``prefill_floor_s``
    when the engine runs it eagerly (no CUDA graph)."""
    spec = spec or Speculation()
    C = np.asarray(concurrency, dtype=np.float64)
    isl, osl = mean_length(isl_tokens, range_ratio), mean_length(osl_tokens, range_ratio)
    ctx = isl + osl / 2.0
    N = np.minimum(C, kv_capacity_sequences(cfg, ctx, kv_capacity_tokens))
    chunk = np.minimum(float(cfg.prefill_chunk_tokens), isl)
    passes = np.maximum(1.0, isl / chunk)
    g = spec.tokens_per_step
    B = N.copy()
    tpot = ttft_svc = X = rho = np.zeros_like(C)
    budget = float(cfg.prefill_chunk_tokens)
    # a chunk's pass of its own (no decodes ride in it): the same every iteration
    alone = None if mixed_prefill else iteration_time_s(cfg, 0.0, 0.0, chunk, 0.0, chunk / isl)
    for i in range(ITERATIONS):
        if mixed_prefill:  # the chunk's marginal cost in a decode pass
            t_d, t_plain, t_mixed = _passes(cfg, B, ctx, spec, (chunk, chunk / isl))
            extra = t_mixed - t_plain
        else:
            t_d, extra = _decode_step(cfg, B, ctx, spec), alone
        X_est = N / np.maximum(ttft_svc + (osl - 1.0) * np.maximum(tpot, t_d / g), 1e-9)
        # Residual until requests are next admitted: one iteration, or the admission cadence
        # when other sequences keep the engine decoding (an idle engine admits at once).
        cadence = admission_interval_iters * t_d
        if balance_ranks:
            cadence = np.minimum(cadence, balance_ranks / np.maximum(X_est, 1e-9))
            busy = np.clip((N - 1.0) / balance_ranks, 0.0, 1.0)
        else:
            busy = np.clip(N - 1.0, 0.0, 1.0)
        cadence = np.maximum(cadence, t_d)
        resid_wait = busy * cadence / 2.0 + (1.0 - busy) * t_d / 2.0
        # Prompts admitted together share one prefill pass (up to the token budget); an eager
        # pass (a mixed iteration: decodes + chunk) costs at least the host floor.
        k = np.clip(X_est * cadence * busy, 1.0, np.maximum(budget / chunk, 1.0))
        pass_s = np.maximum(k * extra, prefill_floor_s - (t_d if mixed_prefill else 0.0))
        t_mix = t_d + pass_s
        per_token = pass_s / (k * chunk)
        # Service of the prompt once its turn comes, and the M/D/1 wait for the chunk budget.
        svc = passes * t_mix
        u = np.minimum(X_est * isl * t_mix / (k * chunk), 0.98)
        wait = u / (2.0 * (1.0 - u)) * svc
        new_ttft = resid_wait + wait + svc + cfg.system.calibrated_request_overhead_s
        rho = np.minimum(X_est * isl * per_token, 0.98)
        new_tpot = t_d / (1.0 - rho) / g
        ttft_svc = 0.5 * ttft_svc + 0.5 * new_ttft if i else new_ttft
        tpot = 0.5 * tpot + 0.5 * new_tpot if i else new_tpot
        resid = ttft_svc + (osl - 1.0) * tpot
        X = N / resid
        B = np.maximum(N * (osl - 1.0) * tpot / resid, np.minimum(N, 1.0))
    ttft = ttft_svc + np.maximum(C - N, 0.0) / X
    out = X * osl
    return {
        "tpot_s": tpot,
        "ttft_s": ttft,
        "requests_per_s": X,
        "output_tok_s": out,
        "output_tok_s_per_gpu": out / cfg.gpus,
        "output_tok_s_per_user": 1.0 / tpot,
        "running": N,
        "decode_batch": B,
        "waiting": np.maximum(C - N, 0.0),
        "prefill_share": rho,
    }


def disaggregated_steady_state(
    prefill_cfg: ServingConfig,
    prefill_workers: int,
    decode_cfg: ServingConfig,
    decode_workers: int,
    concurrency,
    isl_tokens,
    osl_tokens,
    *,
    range_ratio: float = RANGE_RATIO,
    spec: Speculation | None = None,
) -> dict[str, np.ndarray]:
    """Separate prefill and decode pools; per-GPU output is per DECODE GPU (InferenceX)."""
    spec = spec or Speculation()
    C = np.asarray(concurrency, dtype=np.float64)
    isl, osl = mean_length(isl_tokens, range_ratio), mean_length(osl_tokens, range_ratio)
    ctx = isl + osl / 2.0
    chunk = np.minimum(float(prefill_cfg.prefill_chunk_tokens), isl)
    t_chunk = iteration_time_s(prefill_cfg, 0.0, 0.0, chunk, 0.0, chunk / isl)
    svc = np.maximum(1.0, isl / chunk) * t_chunk
    cap_tok_s = prefill_workers * chunk / t_chunk  # prefill tokens/s of the pool
    kv_bytes = isl * decode_cfg.kv_bytes_per_token
    sysm = decode_cfg.system
    both = prefill_cfg.gpus * prefill_workers + decode_cfg.gpus * decode_workers
    link = (
        sysm.scale_up_bytes_per_s
        if sysm.scale_up_domain_gpus >= both
        else sysm.scale_out_bytes_per_s
    )
    # Every GPU of the prefill worker sends its share of the KV in parallel.
    xfer = kv_bytes / (prefill_cfg.gpus * link * decode_cfg.efficiencies.communication)
    per_worker = C / decode_workers
    N = np.minimum(per_worker, kv_capacity_sequences(decode_cfg, ctx))
    g = spec.tokens_per_step
    B = N.copy()
    tpot = ttft = np.zeros_like(C)
    for i in range(ITERATIONS):
        t_d = _decode_step(decode_cfg, B, ctx, spec)
        new_tpot = t_d / g
        X_est = C / np.maximum(ttft + (osl - 1.0) * np.maximum(tpot, new_tpot), 1e-9)
        u = np.minimum(X_est * isl / cap_tok_s, 0.98)
        wait = u / (2.0 * (1.0 - u)) * svc
        new_ttft = wait + svc + xfer + t_d + decode_cfg.system.calibrated_request_overhead_s
        ttft = 0.5 * ttft + 0.5 * new_ttft if i else new_ttft
        tpot = 0.5 * tpot + 0.5 * new_tpot if i else new_tpot
        X = C / (ttft + (osl - 1.0) * tpot)
        B = np.maximum(np.minimum(X / decode_workers * (osl - 1.0) * tpot, N), 1.0)
    ttft = ttft + np.maximum(per_worker - N, 0.0) * decode_workers / X
    out = X * osl
    return {
        "tpot_s": tpot,
        "ttft_s": ttft,
        "requests_per_s": X,
        "output_tok_s": out,
        "output_tok_s_per_gpu": out / (decode_cfg.gpus * decode_workers),
        "output_tok_s_per_user": 1.0 / tpot,
        "running": N * decode_workers,
        "decode_batch": B,
        "waiting": np.maximum(per_worker - N, 0.0) * decode_workers,
        "prefill_share": u,
    }


def benchmark_window_factor(
    concurrency,
    ttft_s,
    tpot_s,
    osl_tokens,
    *,
    requests_per_client: float = REQUESTS_PER_CLIENT,
    range_ratio: float = RANGE_RATIO,
):
    """Share of the steady-state output rate that a finite benchmark run reports.

    ``benchmark_serving`` divides all output tokens by the run's duration, from the first
    request to the LAST completion (``output_throughput = total_output / dur_s``), and a run
    sends ``num_prompts ≈ 10 × concurrency`` requests (InferenceX, measured/SOURCES.md). The
    C slots start together and each runs about k = num_prompts / C requests back to back;
    with output lengths uniform in [r·L, L] a slot's busy time is a sum of k request times
    with standard deviation sqrt(k)·(1 − r)·L·TPOT/sqrt(12), and the run ends with the
    slowest slot: the expected maximum of C such sums is about mean + σ·sqrt(2 ln C)
    (Gaussian order statistics, as for the expert-parallel rank imbalance). Slots that have
    finished idle meanwhile, so the reported rate is k·T / (k·T + drain). 1 at C = 1; about
    0.95 at C = 64. Decodes of the draining requests speed up as the batch shrinks, so this
    slightly overstates the loss."""
    C = np.maximum(np.asarray(concurrency, dtype=np.float64), 1.0)
    L = np.asarray(osl_tokens, dtype=np.float64)
    t_req = np.asarray(ttft_s) + (mean_length(L, range_ratio) - 1.0) * np.asarray(tpot_s)
    sd_one = (1.0 - range_ratio) * L * np.asarray(tpot_s) / np.sqrt(12.0)
    drain = np.sqrt(requests_per_client) * sd_one * np.sqrt(2.0 * np.log(C))
    busy = requests_per_client * t_req
    return busy / (busy + drain)


def throughput_at_interactivity(
    cfg: ServingConfig,
    isl_tokens,
    osl_tokens,
    tokens_per_s_per_user: float,
    *,
    max_concurrency: int = 4096,
    spec: Speculation | None = None,
) -> dict[str, float]:
    """The question users bring: the most output tokens/s per GPU whose per-user speed is still
    ``tokens_per_s_per_user``, over closed-loop concurrencies 1…max_concurrency (one vectorised
    steady-state solve). Returns the chosen concurrency and its steady-state figures; the
    concurrency is 0 and the rates are 0 when even one client is slower than the target."""
    conc = np.arange(1, max_concurrency + 1, dtype=np.float64)
    r = steady_state(cfg, conc, isl_tokens, osl_tokens, spec=spec)
    ok = r["output_tok_s_per_user"] >= tokens_per_s_per_user
    if not ok.any():
        return {"concurrency": 0, **{k: 0.0 for k in r}}
    i = int(np.argmax(np.where(ok, r["output_tok_s_per_gpu"], -1.0)))
    return {"concurrency": int(conc[i]), **{k: float(v[i]) for k, v in r.items()}}
