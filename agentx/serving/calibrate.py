"""Fit per-system efficiencies to measured serving points by robust least squares.

Per system (``hardware`` of the points) five numbers are fitted, each with a physical meaning
and a default of "the cited defaults" (``agentx.replay.config.default_efficiencies``):
``calibrated_compute_scale`` (achieved matmul rate), ``calibrated_hbm_scale`` (achieved HBM
bandwidth), ``calibrated_comm_scale`` (achieved link bandwidth), ``calibrated_floor_scale``
(per-kernel launch/latency floor) and ``calibrated_request_overhead_s`` (serving-stack time
per request outside the GPU: HTTP, tokenizer, scheduler hops).

Residuals are ``log(modelled / measured)`` of TPOT, TTFT and output tok/s per GPU (tok/s per
user is 1000/TPOT, so it is not counted twice). The fit is Gauss-Newton with a numerical
Jacobian and Huber weights by iteratively reweighted least squares (Huber 1964; δ = 0.1, i.e.
10 % in log space), log-parameters bounded to [¼, 4]× and pulled weakly towards the defaults
(a ridge of weight ``PRIOR``) so that a parameter the data cannot see stays at its default.
numpy only: with five parameters per system a hand-written IRLS is a few lines, which is why
scipy is not a dependency.

Leave-one-group-out: each group (system, model, precision, engine) is predicted from a fit to
the other groups; a system seen through one group only falls back to the defaults.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from agentx.catalog.loader import Catalog
from agentx.serving.points import Point
from agentx.serving.validate import model_point

FITTED = ("tpot_ms", "ttft_ms", "output_tok_s_per_gpu")
SCALES = (
    "calibrated_compute_scale",
    "calibrated_hbm_scale",
    "calibrated_comm_scale",
    "calibrated_floor_scale",
)
OVERHEAD = "calibrated_request_overhead_s"
PARAMS = SCALES + (OVERHEAD,)
HUBER_DELTA = 0.1
# Ridge towards the defaults, in log-residual per log-parameter. Chosen among 0.05, 0.3 and 1.0
# by the leave-one-group-out error itself (docs/validation.md), which makes that error
# slightly optimistic. Round 1 (TPOT median 13.4 / 11.8 / 11.1 %, p90 35 / 29 / 28 %) took 0.3;
# re-selected in round 3 with the engine settings modelled (TPOT median 14.9 / 13.1 / 11.7 %,
# p90 39.0 / 27.1 / 24.8 %; output/GPU median 14.8 / 12.8 / 11.5 %, p90 33.1 / 25.4 / 26.0 %).
PRIOR = 1.0
BOUND = np.log(4.0)
OVERHEAD_MAX_S = 2.0
STEPS = 8


def with_params(catalog: Catalog, hw: str, theta: np.ndarray) -> Catalog:
    """``catalog`` with system ``hw`` carrying the parameters ``theta`` (log-scales, overhead)."""
    values = {k: float(np.exp(t)) for k, t in zip(SCALES, theta[:4], strict=True)}
    values[OVERHEAD] = float(theta[4])
    systems = dict(catalog.systems)
    systems[hw] = dataclasses.replace(catalog.systems[hw], **values)
    return dataclasses.replace(catalog, systems=systems)


def theta_of(catalog: Catalog, hw: str) -> np.ndarray:
    s = catalog.systems[hw]
    return np.array([np.log(getattr(s, k)) for k in SCALES] + [getattr(s, OVERHEAD)])


def fit_points(points: list[Point]) -> list[Point]:
    """Points a fit may use: measured, no speculative decoding, not saturated."""
    return [p for p in points if not p.spec and not p.saturated]


def residuals(catalog: Catalog, points: list[Point]) -> np.ndarray:
    out = []
    for p in points:
        got = model_point(catalog, p)
        out += [np.log(got[k] / p.measured[k]) for k in FITTED if k in p.measured]
    return np.array(out)


def fit_system(catalog: Catalog, hw: str, points: list[Point]) -> np.ndarray:
    """Robust fit of system ``hw``'s parameters to ``points`` (all on ``hw``)."""
    theta0 = theta_of(catalog, hw)
    if not points:
        return theta0
    theta = theta0.copy()
    lo = np.array([-BOUND] * 4 + [0.0])
    hi = np.array([BOUND] * 4 + [OVERHEAD_MAX_S])
    step = np.array([0.02] * 4 + [0.005])
    for _ in range(STEPS):
        r = residuals(with_params(catalog, hw, theta), points)
        w = np.where(np.abs(r) <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(np.abs(r), 1e-12))
        J = np.empty((r.size, theta.size))
        for j in range(theta.size):
            t = theta.copy()
            t[j] = t[j] + step[j]
            J[:, j] = (residuals(with_params(catalog, hw, t), points) - r) / step[j]
        sw = np.sqrt(w)
        A = np.vstack([J * sw[:, None], PRIOR * np.eye(theta.size)])
        b = np.concatenate([-r * sw, -PRIOR * (theta - theta0)])
        delta = np.linalg.lstsq(A, b, rcond=None)[0]
        new = np.clip(theta + delta, lo, hi)
        if np.max(np.abs(new - theta)) < 1e-4:
            theta = new
            break
        theta = new
    return theta


def calibrate(catalog: Catalog, points: list[Point], systems: list[str] | None = None):
    """Fitted parameters per system: ``{hw: {param: value}}`` and the fitted catalog."""
    usable = fit_points(points)
    hws = sorted({p.hardware for p in usable} if systems is None else set(systems))
    fitted = catalog
    params = {}
    for hw in hws:
        theta = fit_system(catalog, hw, [p for p in usable if p.hardware == hw])
        fitted = with_params(fitted, hw, theta)
        params[hw] = {
            **{k: float(np.exp(t)) for k, t in zip(SCALES, theta[:4], strict=True)},
            OVERHEAD: float(theta[4]),
        }
    return params, fitted


def leave_one_group_out(catalog: Catalog, points: list[Point], systems: list[str] | None = None):
    """{row: modelled metrics} with each group predicted from a fit to the other groups."""
    usable = fit_points(points)
    if systems is not None:
        usable = [p for p in usable if p.hardware in systems]
    out = {}
    for g in sorted({p.group for p in usable}):
        held = [p for p in usable if p.group == g]
        hw = held[0].hardware
        train = [p for p in usable if p.hardware == hw and p.group != g]
        cat = with_params(catalog, hw, fit_system(catalog, hw, train))
        for p in held:
            out[p.row] = model_point(cat, p)
    return out


def overlay_toml(params: dict, source: str) -> str:
    """Catalog overlay: each system re-declared on its own base with the fitted numbers."""
    lines = [
        "# agentx calibrate: per-system efficiencies fitted to measured serving points.",
        f"# Fitted to: {source}",
        "# Use with --catalog; each entry starts from the built-in system (base) and",
        "# overrides only the calibrated_* keys.",
        "",
    ]
    for hw, vals in sorted(params.items()):
        lines.append(f'[systems."{hw}"]')
        lines.append(f'base = "{hw}"')
        for k in PARAMS:
            lines.append(f"{k} = {vals[k]:.6g}")
        lines.append("")
    return "\n".join(lines)
