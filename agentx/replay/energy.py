"""Energy from work: static power for the time taken plus per-operation energies.

The model (NOTES.md (b), "Suggested model"):

    E = P_static · gpus · t + e_flop(precision) · FLOPs + e_hbm · HBM bytes
        + e_scale_up · scale-up bytes + e_scale_out · scale-out bytes

``P_static`` is the chip's ``idle_w`` (catalog, fitted per NOTES.md (b)). ``e_flop`` per
*achieved* FLOP is calibrated so that a GPU running compute-bound at its default achieved
efficiency draws exactly its TDP: ``e_flop = (TDP − P_static) / (peak(precision) · eff)``.
It is therefore about half for FP8 against BF16, as NOTES.md (b) says. Link energies come
from the system catalog (pJ/bit). Chips without a published TDP (TPUs) fall back to
``FALLBACK_PJ_PER_BF16_FLOP`` and no static power; the summary says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agentx.catalog.types import ServingConfig
from agentx.replay.config import default_efficiencies

FALLBACK_PJ_PER_BF16_FLOP = 0.45  # NOTES.md (b): 0.3-0.5 pJ/FLOP BF16 on Hopper-class silicon


@dataclass(frozen=True)
class EnergyCoefficients:
    static_w: float  # per GPU
    lin_j_per_flop: float  # linear layers at the compute precision
    att_j_per_flop: float  # attention math in BF16
    hbm_j_per_byte: float
    scale_up_j_per_byte: float
    scale_out_j_per_byte: float
    calibrated: bool  # False when the chip has no TDP figure


def j_per_flop(cfg: ServingConfig, precision: str) -> float:
    chip = cfg.chip
    peak = chip.flops_per_s(precision)
    if chip.tdp_w is None:
        return FALLBACK_PJ_PER_BF16_FLOP * 1e-12 * chip.flops_per_s("bf16") / peak
    eff = default_efficiencies(cfg.system, precision).prefill.compute
    return (chip.tdp_w - static_w(cfg)) / (peak * eff)


def static_w(cfg: ServingConfig) -> float:
    chip = cfg.chip
    if chip.idle_w is not None:
        return float(chip.idle_w)
    if chip.tdp_w is None:
        return 0.0
    # No fitted figure: a third of TDP, the middle of the catalog's fitted idle/TDP ratios.
    return chip.tdp_w / 3.0


@functools.lru_cache(maxsize=64)
def coefficients(cfg: ServingConfig) -> EnergyCoefficients:
    sysm = cfg.system
    return EnergyCoefficients(
        static_w=static_w(cfg),
        lin_j_per_flop=j_per_flop(cfg, cfg.compute_precision),
        att_j_per_flop=j_per_flop(cfg, "bf16"),
        hbm_j_per_byte=cfg.chip.hbm_pj_per_bit * 8e-12,
        scale_up_j_per_byte=sysm.scale_up_pj_per_bit * 8e-12,
        scale_out_j_per_byte=sysm.scale_out_pj_per_bit * 8e-12,
        calibrated=cfg.chip.tdp_w is not None,
    )


def energy_j(cfg: ServingConfig, time_s, lin_flops, att_flops, hbm_bytes, su_bytes, so_bytes):
    """Joules for work done over ``time_s`` instance-seconds (all arguments broadcast)."""
    c = coefficients(cfg)
    return (
        c.static_w * cfg.gpus * time_s
        + c.lin_j_per_flop * lin_flops
        + c.att_j_per_flop * att_flops
        + c.hbm_j_per_byte * hbm_bytes
        + c.scale_up_j_per_byte * su_bytes
        + c.scale_out_j_per_byte * so_bytes
    )


def power_w(cfg: ServingConfig, energy, time_s):
    """Average power per GPU of a stage that kept the whole instance busy for ``time_s``."""
    return energy / (time_s * cfg.gpus)
