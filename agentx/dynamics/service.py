"""What the simulator and the sweeps need to know about one serving pool.

``ServiceModel`` is the narrow interface between dynamics and the hardware cost model: the
time and energy of a fill of ``new`` tokens onto a ``prefix`` (SEED-8/9), the time and energy
of one decode step of a batch with a given context sum (SEED-10/11), how many KV tokens the
pool can hold and what it draws when idle. ``CostModelService`` wraps the real cost model
(``agentx.replay``); ``AnalyticService`` is a small roofline with explicit constants, used by
unit tests so the engine can be checked against numbers one can work out by hand.

``service_tables`` samples a model once into the lookup tables the numba simulator reads,
so no Python runs inside the time loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

# Decode tables are indexed by mean context per sequence on a log grid (1 token … 4 M tokens);
# linear interpolation between 64 nodes keeps the error far below the model's own.
CTX_GRID_TOKENS = np.unique(np.round(np.geomspace(1, 4 * 2**20, 64)))
FILL_GRID_TOKENS = np.unique(np.round(np.geomspace(1, 4 * 2**20, 64)))


@dataclass(frozen=True)
class Cost:
    time_s: np.ndarray
    energy_j: np.ndarray


class ServiceModel(Protocol):
    name: str
    gpus: int
    kv_bytes_per_token: float
    kv_capacity_tokens: float  # KV tokens the pool can keep resident after weights and workspace
    idle_power_w: float  # whole pool, doing nothing

    def link(self, other_gpus: int) -> tuple[float, float]:
        """(achieved bytes/s per GPU, J per byte) for KV sent to a pool of ``other_gpus``."""
        ...

    def fill(self, new_tokens: np.ndarray, prefix_tokens: np.ndarray) -> Cost: ...

    def decode_step(self, batch_size: np.ndarray, context_tokens_sum: np.ndarray) -> Cost: ...


@dataclass(frozen=True)
class AnalyticService:
    """A roofline with explicit constants (defaults: a Kimi-K2-like MoE in FP8 on 8 B200s).

    decode step: flops = 2·active·B + attn·ctx_sum; bytes = dense + experts_touched(B) + kv·ctx_sum;
    fill: flops = 2·active·n + attn·(n·P + n²/2); bytes = weights + kv·(P + n).
    time = max(flops / F, bytes / BW) + floor; energy = idle·time + pJ/flop·flops + pJ/B·bytes.
    """

    name: str = "analytic"
    gpus: int = 8
    flops_per_s: float = 8 * 4.5e15 * 0.6
    hbm_bytes_per_s: float = 8 * 8e12 * 0.7
    active_params: float = 32e9
    dense_weight_bytes: float = 12e9
    expert_bytes: float = 384 * 60 * 44e6  # experts × MoE layers × bytes per expert (FP8)
    n_experts: int = 384
    experts_per_token: int = 8
    kv_bytes_per_token: float = 40_016.0  # FlashMLA FP8 latent, 61 layers (NOTES.md (a))
    attn_flops_per_token_pair: float = 61 * 2 * 64 * (576 + 512)
    kv_capacity_tokens: float = 8 * 60e9 / 40_016.0
    idle_power_w: float = 8 * 300.0
    pj_per_flop: float = 0.25
    pj_per_byte: float = 4.0 * 8
    floor_s: float = 2e-3
    link_bytes_per_s: float = 630e9
    link_j_per_byte: float = 10e-12 * 8

    def link(self, other_gpus: int) -> tuple[float, float]:
        return self.link_bytes_per_s, self.link_j_per_byte

    def _roofline(self, flops, nbytes) -> Cost:
        t = np.maximum(flops / self.flops_per_s, nbytes / self.hbm_bytes_per_s) + self.floor_s
        e = self.idle_power_w * t + 1e-12 * (self.pj_per_flop * flops + self.pj_per_byte * nbytes)
        return Cost(t, e)

    def decode_step(self, batch_size, context_tokens_sum) -> Cost:
        b = np.asarray(batch_size, dtype=np.float64)
        c = np.asarray(context_tokens_sum, dtype=np.float64)
        touched = 1.0 - (1.0 - self.experts_per_token / self.n_experts) ** b
        flops = 2 * self.active_params * b + self.attn_flops_per_token_pair * c
        nbytes = self.dense_weight_bytes + self.expert_bytes * touched + self.kv_bytes_per_token * c
        return self._roofline(flops, nbytes)

    def fill(self, new_tokens, prefix_tokens) -> Cost:
        n = np.maximum(np.asarray(new_tokens, dtype=np.float64), 1.0)
        p = np.asarray(prefix_tokens, dtype=np.float64)
        flops = 2 * self.active_params * n + self.attn_flops_per_token_pair * (n * p + n * n / 2)
        nbytes = self.dense_weight_bytes + self.expert_bytes + self.kv_bytes_per_token * (p + n)
        return self._roofline(flops, nbytes)


@dataclass(frozen=True)
class ServiceTables:
    """One pool sampled for the simulator: decode[b, g] at batch b and mean context grid g."""

    decode_time_s: np.ndarray
    decode_energy_j: np.ndarray
    ctx_grid_tokens: np.ndarray
    prefill_time_s: np.ndarray  # fill with no prefix, for recomputing a preempted sequence
    prefill_energy_j: np.ndarray
    fill_grid_tokens: np.ndarray


def service_tables(svc: ServiceModel, max_batch: int) -> ServiceTables:
    b = np.arange(0, max_batch + 1, dtype=np.float64)[:, None]
    g = CTX_GRID_TOKENS[None, :]
    bb, gg = np.broadcast_arrays(np.maximum(b, 1.0), g)
    dec = svc.decode_step(bb.ravel(), (bb * gg).ravel())
    shape = (max_batch + 1, g.shape[1])
    t = np.asarray(dec.time_s, dtype=np.float64).reshape(shape).copy()
    e = np.asarray(dec.energy_j, dtype=np.float64).reshape(shape).copy()
    t[0] = 0.0
    e[0] = 0.0
    pre = svc.fill(FILL_GRID_TOKENS, np.zeros_like(FILL_GRID_TOKENS))
    return ServiceTables(
        t,
        e,
        CTX_GRID_TOKENS.astype(np.float64),
        np.asarray(pre.time_s, dtype=np.float64),
        np.asarray(pre.energy_j, dtype=np.float64),
        FILL_GRID_TOKENS.astype(np.float64),
    )


@dataclass(frozen=True)
class CostModelService:
    """A pool served as one instance of ``cfg``, costed by ``agentx.replay.stages``.

    Fills run alone (ceil(new / chunk) passes, bearing their own weight loads), so the fill
    stage is a FIFO server of predictable work (SEED-15). The cost model's own estimate of
    disaggregated KV transfer bytes is left out here (``pools='aggregated'`` for costing):
    the simulator moves and times the KV itself. KV capacity is what HBM leaves after
    weights, activations and workspace, without a prefetch double buffer.
    """

    cfg: object  # agentx.catalog.types.ServingConfig

    @classmethod
    def build(cls, catalog, hw: str, model: str, gpus: int, **kw) -> CostModelService:
        from agentx.replay.config import make_config
        from agentx.replay.footprint import check_fits

        cfg = make_config(catalog, hw=hw, model=model, gpus=gpus, pools="aggregated", **kw)
        check_fits(cfg)
        return cls(cfg)

    @property
    def name(self) -> str:
        return f"{self.cfg.system.name}x{self.cfg.gpus}"

    @property
    def gpus(self) -> int:
        return self.cfg.gpus

    @property
    def kv_bytes_per_token(self) -> float:
        return float(self.cfg.kv_bytes_per_token)

    @property
    def kv_capacity_tokens(self) -> float:
        from agentx.replay.footprint import max_resident_tokens

        return float(max_resident_tokens(self.cfg, double_buffer=False))

    @property
    def idle_power_w(self) -> float:
        from agentx.replay.energy import static_w

        return float(static_w(self.cfg)) * self.cfg.gpus

    def crosses_scale_out(self, other_gpus: int) -> bool:
        """Does a KV transfer to a pool of ``other_gpus`` leave the scale-up domain (SEED-20)?"""
        return self.cfg.gpus + other_gpus > self.cfg.system.scale_up_domain_gpus

    def link(self, other_gpus: int) -> tuple[float, float]:
        """(bytes/s per GPU achieved, J per byte) to a pool of ``other_gpus`` GPUs."""
        s, eff = (
            self.cfg.system,
            (self.cfg.efficiencies.communication if self.cfg.efficiencies else 0.7),
        )
        if self.crosses_scale_out(other_gpus):
            return s.scale_out_bytes_per_s * eff, s.scale_out_pj_per_bit * 8e-12
        return s.scale_up_bytes_per_s * eff, s.scale_up_pj_per_bit * 8e-12

    def fill(self, new_tokens, prefix_tokens) -> Cost:
        from agentx.replay.stages import fill_cost

        c = fill_cost(
            self.cfg, np.maximum(np.asarray(new_tokens, dtype=np.float64), 1.0), prefix_tokens
        )
        return Cost(
            np.asarray(c["time_s"], dtype=np.float64), np.asarray(c["energy_j"], dtype=np.float64)
        )

    def decode_step(self, batch_size, context_tokens_sum) -> Cost:
        from agentx.replay.stages import decode_attention_step, decode_experts_step

        a = decode_attention_step(self.cfg, batch_size, context_tokens_sum)
        x = decode_experts_step(self.cfg, batch_size)
        return Cost(
            np.asarray(a["time_s"] + x["time_s"], dtype=np.float64),
            np.asarray(a["energy_j"] + x["energy_j"], dtype=np.float64),
        )
