"""One configuration priced against the load (the planner's seam to the serving model).

Aggregated (``evaluate``: every instance fills and decodes) or disaggregated
(``evaluate_disaggregated``: separate prefill and decode pools): the decode batch is the largest
whose p99 TPOT meets the service level (``_batch_grid``), bisected down until the replayed HBM
peak fits (``_largest_fitting_batch``); instances, TTFT percentiles, cost and energy make the
result row (``_row``).
"""

from __future__ import annotations

import math

import numpy as np

from agentx.errors import UsageError
from agentx.planner.load import Load
from agentx.units import GB, HOUR_S, MILLION

BATCHES = np.unique(np.round(np.geomspace(1, 4096, 49)))


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
