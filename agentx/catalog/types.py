"""Frozen specs for chips, systems and models, and the serving configuration.

These dataclasses are the contract between the catalogs (TOML data, ``agentx.catalog``) and
everything that computes with them (cost model, footprint, KV tiers, dynamics). Units are in
field names; every catalog entry carries ``source``. Derived quantities are properties so
they are computed from one definition only.

This module owns the serving configuration (``ServingConfig``, its stage efficiencies); the
number formats, ``ChipSpec`` and ``SystemSpec`` are defined in ``agentx.catalog.hardware`` and
``ModelSpec`` in ``agentx.catalog.model_spec`` (one definition each), and every public name
stays importable from here (``__all__``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agentx.catalog.hardware import (
    BYTES_PER_ELEMENT,
    COMPUTE_OF,
    PRECISIONS,
    WEIGHT_FORMATS,
    ChipSpec,
    SystemSpec,
)
from agentx.catalog.model_spec import ModelSpec


@dataclass(frozen=True)
class StageEfficiency:
    """Achieved fraction of peak for one stage (roofline derating)."""

    compute: float
    memory: float
    source: str = ""


@dataclass(frozen=True)
class Efficiencies:
    prefill: StageEfficiency
    midfill: StageEfficiency
    decode_attention: StageEfficiency
    decode_experts: StageEfficiency
    communication: float = 0.7  # achieved fraction of link bandwidth for dispatch/combine
    kernel_floor_s: float = 5e-6  # per-kernel launch/latency floor (NOTES.md (d): 5–10 µs)


@dataclass(frozen=True)
class ServingConfig:
    """How one model instance is served on ``gpus`` GPUs of ``system``.

    ``gpus`` is the whole deployment serving one model instance (16–64+ in the seed's study).
    Attention runs tensor-parallel over ``tp`` ranks inside each of ``pp`` pipeline stages;
    with ``dp_attention`` every rank instead runs attention for its own requests (weights and
    the MLA latent are replicated, KV is not). MoE experts are spread over ``ep`` ranks.
    ``decode_batch`` counts sequences in one decode step of the whole instance.
    """

    system: SystemSpec
    model: ModelSpec
    gpus: int
    tp: int = 8
    pp: int = 1
    ep: int = 8
    dp_attention: bool = False
    weight_precision: str = "fp8"  # attention / dense / shared-expert weights
    kv_precision: str = "fp8"
    compute_precision: str = "fp8"
    expert_precision: str | None = None  # routed experts; None = weight_precision
    activation_bytes: float = 2.0
    decode_batch: int = 64
    prefill_chunk_tokens: int = 8192
    routing_skew: float = 0.0  # 0 = uniform expert routing; >0 = Zipf exponent over experts
    pools: str = "disaggregated"  # or "aggregated"
    efficiencies: Efficiencies | None = None  # None → defaults cited in agentx.replay
    workspace_bytes_per_gpu: float = 2e9
    extra: dict = field(default_factory=dict)

    @property
    def chip(self) -> ChipSpec:
        return self.system.chip

    @property
    def weight_bytes_per_param(self) -> float:
        return BYTES_PER_ELEMENT[self.weight_precision]

    @property
    def expert_bytes_per_param(self) -> float:
        return BYTES_PER_ELEMENT[self.expert_precision or self.weight_precision]

    @property
    def expert_compute_precision(self) -> str:
        """Datapath of the routed-expert GEMMs (falls back to the chip's widest if missing)."""
        return COMPUTE_OF[self.expert_precision or self.weight_precision]

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_precision)

    @property
    def replicas(self) -> int:
        """Data-parallel copies of the attention/dense part inside the instance."""
        return max(1, self.gpus // (self.tp * self.pp))

    @property
    def ep_crosses_scale_out(self) -> bool:
        return self.ep > self.system.scale_up_domain_gpus

    def __hash__(self) -> int:  # dict field breaks the generated hash
        return hash(
            (
                self.system.name,
                self.model.name,
                self.gpus,
                self.tp,
                self.pp,
                self.ep,
                self.dp_attention,
                self.weight_precision,
                self.expert_precision,
                self.kv_precision,
                self.decode_batch,
                self.prefill_chunk_tokens,
            )
        )


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = [
    "BYTES_PER_ELEMENT",
    "COMPUTE_OF",
    "PRECISIONS",
    "WEIGHT_FORMATS",
    "ChipSpec",
    "Efficiencies",
    "ModelSpec",
    "ServingConfig",
    "StageEfficiency",
    "SystemSpec",
    "ceil_div",
    "math",
]
