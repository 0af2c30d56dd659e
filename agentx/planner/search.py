"""The cheapest configuration of each system that serves a trace's load within a service level.

For every layout of a system (GPUs per model instance, data- or tensor-parallel attention)
that holds the model's weights:

1. steady-state in-flight batching (``agentx.planner.serving``, on engineer #9's iteration
   model ``agentx.serving.iteration``) gives, for every decode batch B, the time per output
   token with the trace's prefill chunks interleaved and the calls/s one instance serves;
2. the decode batch is the largest whose TPOT meets the limit and whose KV fits — the
   replay of the trace at that batch (``agentx.replay``) confirms the HBM peak with the
   trace's real contexts (bisecting B down when it does not fit) and prices the energy;
3. instances = ⌈offered calls/s ÷ calls/s per instance⌉; a load K times larger
   (``--load-scale``, sessions replicated) is K times the offered rate;
4. a layout meets the service level when its TPOT and its TTFT percentiles (chunked prefill
   of the call's new tokens plus the M/D/1 wait for the prefill budget) are within it.

The cheapest layout is the one with fewest GPUs (one price per GPU-hour per system), then the
least energy. Energy counts the replayed work plus the idle (static) draw of provisioned GPUs
for the time they are not busy, so over-provisioning costs joules as it costs dollars.

``evaluate`` is the one seam to the serving model: it prices one configuration. The frontier
(output tokens/s per GPU against tokens/s per user, the chart public benchmarks publish) comes
from the same steady state over every decode batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from agentx.errors import CapacityError, UsageError
from agentx.units import GB, HOUR_S, MILLION

BATCHES = np.unique(np.round(np.geomspace(1, 4096, 49)))
RESULT_KEYS = (
    "hw",
    "gpus",
    "instances",
    "gpus_per_instance",
    "serving",
    "layout",
    "decode_batch",
    "meets_slo",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "gpu_hours",
    "j_per_output_token",
    "usd_per_gpu_hour",
    "usd_per_m_output_tokens",
    "hbm_peak_gb_per_gpu",
    "tpot_ms",
    "tpot_p99_ms",
    "ttft_p99_ms",
    "utilization",
)


# The columns of the printed table (the rest are in --json and the run's compare.parquet).
TABLE_KEYS = (
    "hw",
    "gpus",
    "layout",
    "meets_slo",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "gpu_hours",
    "j_per_output_token",
    "usd_per_m_output_tokens",
    "hbm_peak_gb_per_gpu",
    "tpot_p99_ms",
    "ttft_p99_ms",
)


@dataclass(frozen=True)
class Load:
    """The offered load: the trace's calls over its duration, ``scale`` times over.

    ``scale`` = K prices K replicas of every session (``agentx.traces.transform.scale_load``)
    without building them: replicas are priced call by call exactly as their originals, so
    busy time, energy and tokens are K times the trace's and every latency percentile is the
    trace's own (tests/test_planner.py checks this against the materialised replicas).
    """

    calls: pl.DataFrame
    duration_s: float
    scale: float = 1.0

    @property
    def output_tokens(self) -> float:
        return self.scale * float(self.calls.get_column("output_tokens").sum())

    @property
    def total_tokens(self) -> float:
        return self.scale * float(self.calls.get_column("input_tokens").sum()) + self.output_tokens


def trace_load(calls: pl.DataFrame, scale: float = 1.0) -> Load:
    """The load of ``calls``: their span from the first arrival to the last (at least 1 s)."""
    if calls.height == 0:
        raise UsageError("the trace has no calls to plan for")
    if not (scale > 0 and math.isfinite(scale)):
        raise UsageError(f"--load-scale must be a positive number, got {scale:g}")
    t = calls.get_column("t_start_s")
    return Load(calls, max(float(t.max() - t.min()), 1.0), float(scale))


def layouts(system, model, gpus: list[int] | None) -> list[tuple[int, bool | None]]:
    """(GPUs per instance, data-parallel attention) candidates: powers of two up to a node, node
    multiples (powers of two) up to the scale-up domain (at least 8 nodes), or the user's counts."""
    if gpus is None:
        node, dom = system.gpus_per_node, system.scale_up_domain_gpus
        top = min(max(dom, 8 * node), 128)
        # a small model may need less than a node: 1, 2, 4, … GPUs are tried too
        gpus = sorted(
            {2**i for i in range(8) if 2**i < node}
            | {node * 2**i for i in range(8) if node * 2**i <= top}
            | {min(dom, top)}
        )
    attn = (True, False) if model.attention == "mla" else (None,)
    return [(g, a) for g in gpus for a in attn]


def _batch_grid(cfg, shape, load_calls, slo, points):
    """The largest decode batch whose p99 TPOT meets the SLO (KV at the mean context fits),
    then bisected down until the replayed HBM peak fits: (cfg at that batch, replay summary)."""
    from agentx.replay.footprint import describe
    from agentx.replay.replay import replay_trace
    from agentx.serving.steady import kv_capacity_sequences

    cap = float(kv_capacity_sequences(cfg, shape.decode_context_tokens))
    grid = np.unique(np.append(BATCHES[cap >= BATCHES], cap))
    pts = points(grid)
    ok = pts["tpot_p99_s"] <= slo.get("tpot_p99", np.inf) * (1 + 1e-9)
    if not ok.any():
        best = 1.0 / float(pts["tpot_p99_s"][0])
        raise UsageError(
            f"tpot_p99 {slo['tpot_p99'] * 1e3:g} ms is out of reach on {describe(cfg)}: "
            f"one sequence gets {best:,.1f} tokens/s"
        )
    return _largest_fitting_batch(cfg, load_calls, int(grid[ok].max()), replay_trace)


def _ttft_quantiles(load: Load) -> dict[str, float]:
    new = load.calls.get_column("new_tokens")
    return {
        p: float(new.quantile(q) or 1.0) for p, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    }


def _meets(slo: dict, tpot_p99_s: float, ttft: dict) -> bool:
    return all(
        (tpot_p99_s if k == "tpot_p99" else ttft[k]) <= v * (1 + 1e-9) for k, v in slo.items()
    )


def _row(cfg, load: Load, s: dict, price, *, gpus, instances, layout, serving, tpot_s,
         tpot_p99_s, ttft_p99_s, meets, busy_gpu_s, shape) -> dict:  # fmt: skip
    """The result row: per-GPU rates, cost and energy (replayed work + idle draw of the GPUs
    provisioned for the time they are not busy)."""
    from agentx.replay.energy import coefficients

    hours = gpus * load.duration_s / HOUR_S
    idle_j = coefficients(cfg).static_w * max(gpus * load.duration_s - busy_gpu_s, 0.0)
    energy = s["total_energy_j"] * load.scale + idle_j
    out_tok = load.output_tokens
    return {
        "hw": cfg.system.name,
        "gpus": gpus,
        "instances": instances,
        "gpus_per_instance": cfg.gpus,
        "serving": serving,
        "layout": layout,
        "decode_batch": cfg.decode_batch,
        "meets_slo": bool(meets and s["kv_fits_in_hbm"]),
        "output_tok_s_per_gpu": out_tok / load.duration_s / gpus,
        "total_tok_s_per_gpu": load.total_tokens / load.duration_s / gpus,
        "gpu_hours": hours,
        "j_per_output_token": energy / out_tok if out_tok > 0 else None,
        "usd_per_gpu_hour": price,
        "usd_per_m_output_tokens": (
            price * hours / (out_tok / MILLION) if price is not None and out_tok > 0 else None
        ),
        "hbm_peak_gb_per_gpu": s["hbm_peak_bytes_per_gpu"] / GB,
        "tpot_ms": tpot_s * 1e3,
        "tpot_p99_ms": tpot_p99_s * 1e3,
        "ttft_p99_ms": ttft_p99_s * 1e3,
        "utilization": busy_gpu_s / (gpus * load.duration_s),
        "_cfg": cfg,
        "_shape": shape,
    }


def _n(n: int, cfg) -> str:
    from agentx.replay.footprint import describe

    return f"{n} instance{'s' if n != 1 else ''} of {describe(cfg)}"


def evaluate(cfg, load: Load, slo: dict[str, float], price: float | None) -> dict:
    """One aggregated configuration (every instance fills and decodes) priced against the load
    (the seam to the serving model).

    Throughput, TPOT and TTFT come from the steady state of in-flight batching
    (``agentx.planner.serving`` on ``agentx.serving.iteration``); energy per call and the HBM
    peak from the replay of the trace at the chosen decode batch."""
    from agentx.planner.serving import operating_points, trace_shape, ttft_s

    shape = trace_shape(load.calls)
    cfg, s = _batch_grid(cfg, shape, load.calls, slo, lambda b: operating_points(cfg, shape, b))
    batch = cfg.decode_batch
    pt = {k: float(v[0]) for k, v in operating_points(cfg, shape, [batch]).items()}
    rate = load.scale * load.calls.height / load.duration_s  # calls/s offered
    instances = max(1, math.ceil(rate / pt["calls_per_s"] - 1e-9))
    busy_s = rate * load.duration_s / pt["calls_per_s"]  # instance-seconds at full batch
    ttft = {
        f"ttft_{p}": ttft_s(cfg, shape, batch, rate / instances, n)
        for p, n in _ttft_quantiles(load).items()
    }
    return _row(
        cfg, load, s, price, gpus=instances * cfg.gpus, instances=instances,
        layout=f"aggregated, {_n(instances, cfg)}", serving="aggregated", tpot_s=pt["tpot_s"],
        tpot_p99_s=pt["tpot_p99_s"], ttft_p99_s=ttft["ttft_p99"],
        meets=_meets(slo, pt["tpot_p99_s"], ttft), busy_gpu_s=busy_s * cfg.gpus, shape=shape,
    )  # fmt: skip


def evaluate_disaggregated(decode_cfg, prefill_cfgs, load: Load, slo, price) -> dict:
    """Separate prefill and decode pools (``agentx.planner.serving.disaggregated_points``):
    the decode pool at the largest batch meeting the p99 TPOT, sized to the offered calls/s;
    for each prefill layout the fewest prefill instances whose TTFT percentiles meet the SLO;
    the pair with fewest GPUs. Energy: the replayed work plus idle draw."""
    from agentx.planner.serving import disaggregated_points, disaggregated_ttft_s, trace_shape

    shape = trace_shape(load.calls)
    p0 = prefill_cfgs[0]
    cfg, s = _batch_grid(
        decode_cfg, shape, load.calls, slo,
        lambda b: disaggregated_points(p0, decode_cfg, shape, b),
    )  # fmt: skip
    batch, rate = cfg.decode_batch, load.scale * load.calls.height / load.duration_s
    quant = _ttft_quantiles(load)
    best = None
    for pcfg in prefill_cfgs:
        pt = {
            k: float(np.ravel(v)[0])
            for k, v in disaggregated_points(pcfg, cfg, shape, [batch]).items()
        }
        dec = max(1, math.ceil(rate / pt["calls_per_s"] - 1e-9))
        k0 = max(1, math.ceil(rate / pt["prefill_calls_per_s"] / 0.98 - 1e-9))
        ks = np.arange(k0, 4 * k0 + 16)  # prefill instances: the fewest meeting the TTFT
        ttft = {
            f"ttft_{p}": disaggregated_ttft_s(pcfg, shape, pt, rate / ks, n)
            for p, n in quant.items()
        }
        good = np.array([_meets(slo, pt["tpot_p99_s"], {k: v[i] for k, v in ttft.items()})
                         for i in range(ks.size)])  # fmt: skip
        i = int(np.argmax(good)) if good.any() else ks.size - 1
        gpus = dec * cfg.gpus + int(ks[i]) * pcfg.gpus
        key = (not good[i], gpus)
        if best is None or key < best[0]:
            busy = (
                rate
                * load.duration_s
                * (cfg.gpus / pt["calls_per_s"] + pcfg.gpus / pt["prefill_calls_per_s"])
            )
            layout = f"disaggregated, prefill {_n(int(ks[i]), pcfg)} + decode {_n(dec, cfg)}"
            best = (key, dict(
                gpus=gpus, instances=dec + int(ks[i]), layout=layout, serving="disaggregated",
                tpot_s=pt["tpot_s"], tpot_p99_s=pt["tpot_p99_s"],
                ttft_p99_s=float(ttft["ttft_p99"][i]), meets=bool(good[i]), busy_gpu_s=busy,
            ), pcfg)  # fmt: skip
    return {**_row(cfg, load, s, price, shape=shape, **best[1]), "_prefill_cfg": best[2]}


def _largest_fitting_batch(cfg, calls, batch: int, replay_trace):
    """``cfg`` at the largest decode batch ≤ ``batch`` whose replayed HBM peak fits, and its
    replay summary. The TPOT search sizes KV at the mean context; the replay's peak holds the
    trace's real contexts, so it can be larger. Resident KV grows with the batch: bisect."""
    import dataclasses

    def run(b: int):
        c = dataclasses.replace(cfg, decode_batch=int(b))
        return c, replay_trace(calls, c).summary

    best = run(batch)
    if best[1]["kv_fits_in_hbm"] or batch <= 1:
        return best
    lo, hi, fit = 1, batch - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        c, s = run(mid)
        if s["kv_fits_in_hbm"]:
            fit, lo = (c, s), mid + 1
        else:
            hi = mid - 1
    return fit or run(1)


def frontier_points(row: dict) -> pl.DataFrame:
    """Output tokens/s per GPU against tokens/s per user over decode batches, for one layout
    (the same steady state as ``evaluate``: prefill interleaving included; disaggregated, the
    prefill GPUs the decode rate needs are counted per GPU)."""
    from agentx.planner.serving import disaggregated_points, operating_points
    from agentx.serving.steady import kv_capacity_sequences

    cfg, shape = row["_cfg"], row["_shape"]
    b = BATCHES[kv_capacity_sequences(cfg, shape.decode_context_tokens) >= BATCHES]
    pcfg = row.get("_prefill_cfg")
    if pcfg is None:
        pts = operating_points(cfg, shape, b)
        per_gpu = pts["output_tok_s"] / cfg.gpus
    else:
        pts = disaggregated_points(pcfg, cfg, shape, b)
        prefill_gpus = pts["calls_per_s"] / pts["prefill_calls_per_s"] * pcfg.gpus
        per_gpu = pts["output_tok_s"] / (cfg.gpus + prefill_gpus)
    return pl.DataFrame(
        {
            "hw": cfg.system.name,
            "layout": row["layout"],
            "decode_batch": b.astype(np.int64),
            "tok_s_per_user": 1.0 / pts["tpot_s"],
            "output_tok_s_per_gpu": per_gpu,
        }
    )


def pareto(points: pl.DataFrame) -> pl.DataFrame:
    """Per system, the points no other point beats on both tokens/s per user and per GPU."""
    return (
        points.sort(
            ["hw", "tok_s_per_user", "output_tok_s_per_gpu"], descending=[False, True, True]
        )
        .with_columns(_best=pl.col("output_tok_s_per_gpu").cum_max().over("hw"))
        .filter(pl.col("output_tok_s_per_gpu") >= pl.col("_best"))
        .unique(["hw", "tok_s_per_user"], keep="first", maintain_order=True)
        .drop("_best")
        .sort("hw", "tok_s_per_user")
    )


def plan_system(
    catalog, hw: str, model: str, load: Load, slo: dict[str, float], *,
    gpus: list[int] | None = None, usd_per_gpu_hour: float | None = None, **config,
) -> tuple[dict, list[dict], pl.DataFrame]:  # fmt: skip
    """(cheapest configuration, every configuration tried, frontier points) for one system."""
    from agentx.planner.prices import default_price
    from agentx.replay.config import make_config
    from agentx.replay.footprint import check_fits

    price, source = (
        (usd_per_gpu_hour, "--usd-per-gpu-hour")
        if usd_per_gpu_hour is not None
        else default_price(hw)
    )
    system, spec = catalog.system(hw), catalog.model(model)
    tried, skipped, points, fitting = [], [], [], []
    for g, dp in layouts(system, spec, gpus):
        try:
            cfg = make_config(catalog, hw, model, gpus=g, dp_attention=dp, **config)
            check_fits(cfg)
        except (CapacityError, UsageError) as err:
            skipped.append({"gpus_per_instance": g, "reason": str(err)})
            continue
        fitting.append(cfg)
    # aggregated instances, then each layout as the decode pool beside every prefill layout
    for cfg in fitting:
        for fn in (evaluate, lambda c, *a: evaluate_disaggregated(c, fitting, *a)):
            try:
                row = fn(cfg, load, slo, price)
            except (CapacityError, UsageError) as err:
                skipped.append({"gpus_per_instance": cfg.gpus, "reason": str(err)})
                continue
            tried.append(row)
            points.append(frontier_points(row))
    if not tried:
        reasons = "; ".join(sorted({s["reason"] for s in skipped}))[:400]
        raise UsageError(f"no layout of {hw} can serve {model}: {reasons}")
    ok = [r for r in tried if r["meets_slo"]]
    # Fewest GPUs, then least energy; without any layout in the SLO, the fastest TPOT one.
    best = (
        min(ok, key=lambda r: (r["gpus"], r["j_per_output_token"] or 0.0))
        if ok
        else min(tried, key=lambda r: (r["tpot_ms"], r["ttft_p99_ms"]))
    )
    best = {**best, "price_source": source, "layouts_tried": len(tried)}
    return best, tried, pl.concat(points)


def compare(
    catalog, trace, systems: list[str], model: str = "kimi-k2", slo: dict | None = None,
    load_scale: float = 1.0, on_system=None, **kw,
) -> tuple[list[dict], pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """For each system its cheapest configuration (``RESULT_KEYS`` + price source), a frame of
    every configuration tried, and the Pareto frontier points of all systems."""
    from agentx.planner.slo import DEFAULT, parse_slo

    slo = parse_slo(DEFAULT) if slo is None else slo
    calls = trace.calls if hasattr(trace, "calls") else trace
    load = trace_load(calls, load_scale)
    results, tried, points = [], [], []
    for hw in systems:
        if on_system is not None:
            on_system(hw)  # progress: one step per system
        best, rows, pts = plan_system(catalog, hw, model, load, slo, **kw)
        results.append({k: v for k, v in best.items() if not k.startswith("_")})
        tried += [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
        points.append(pts)
    return results, pl.DataFrame(tried), pareto(pl.concat(points))
