"""Frozen specs for chips, systems and models, and the serving configuration.

These dataclasses are the contract between the catalogs (TOML data, ``agentx.catalog``) and
everything that computes with them (cost model, footprint, KV tiers, dynamics). Units are in
field names; every catalog entry carries ``source``. Derived quantities are properties so
they are computed from one definition only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

PRECISIONS = ("bf16", "fp8", "fp4")  # compute (datapath) precisions, narrowest last
# Stored weight formats. ``fp4`` is the generic 4-bit float with MX block scales (kept for
# compatibility); the named formats carry their own scale overhead:
#   nvfp4  4 bits + one FP8 (E4M3) scale per 16 elements = 4.5 bits (NVIDIA NVFP4 format, TRT
#          Model Optimizer; the correction of 4.25)
#   mxfp4  4 bits + one 8-bit (E8M0) scale per 32 elements = 4.25 bits (OCP MX spec v1.0; the
#          GPT-OSS checkpoint figure, NOTES.md (a))
#   int4   W4A16 weight-only: 4 bits + one BF16 scale per group of 32 = 4.5 bits (Kimi K2
#          Thinking/K2.5 compressed-tensors checkpoint, group_size 32); math runs in BF16
WEIGHT_FORMATS = ("bf16", "fp8", "fp4", "nvfp4", "mxfp4", "int4")

# Bytes per stored element.
BYTES_PER_ELEMENT: dict[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0,
    "fp4": 4.25 / 8,
    "nvfp4": 4.5 / 8,
    "mxfp4": 4.25 / 8,
    "int4": 4.5 / 8,
}
# The datapath a weight format computes on where the chip has it (weight-only INT4 dequantises
# to BF16; FP4 formats fall back to the next wider datapath on chips without FP4).
COMPUTE_OF: dict[str, str] = {
    "bf16": "bf16",
    "fp8": "fp8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "int4": "bf16",
}


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator package as the cost model sees it (per GPU)."""

    name: str
    display_name: str
    vendor: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    bf16_flops_per_s: float
    fp8_flops_per_s: float | None
    fp4_flops_per_s: float | None
    tdp_w: float | None
    idle_w: float | None  # static power when idle; None → derived from TDP by the energy model
    mamf_fraction: float | None  # measured best-shape matmul fraction of dense peak (NOTES.md (d))
    hbm_pj_per_bit: float  # HBM device + PHY energy (NOTES.md (b))
    source: str
    mamf_fp8_fraction: float | None = None  # same as mamf_fraction, FP8 matmuls (NOTES.md (d))

    def flops_per_s(self, precision: str) -> float:
        """Dense peak for a compute precision; falls back to the next wider one if unsupported."""
        order = PRECISIONS[PRECISIONS.index(precision) :: -1]
        for p in order:
            v = getattr(self, f"{p}_flops_per_s")
            if v:
                return float(v)
        raise ValueError(f"{self.name} has no dense FLOP/s figure")


@dataclass(frozen=True)
class SystemSpec:
    """A chip deployed in a system: scale-up domain, networks, host memory, SSD (per GPU)."""

    name: str
    display_name: str
    chip: ChipSpec
    gpus_per_node: int
    scale_up_domain_gpus: int
    scale_up_bytes_per_s: float  # per GPU, per direction
    scale_out_bytes_per_s: float  # per GPU, per direction
    host_link: str  # "pcie5" | "pcie6" | "nvlink-c2c" | …
    host_link_bytes_per_s: float  # GPU ↔ host DRAM, per GPU, per direction (achievable)
    host_dram_bytes: float  # per GPU
    host_dram_bytes_per_s: float  # host memory bandwidth share per GPU
    ssd_bytes_per_s: float  # local NVMe read bandwidth share per GPU
    ssd_bytes_per_node: float
    scale_up_pj_per_bit: float
    scale_out_pj_per_bit: float
    host_link_pj_per_bit: float
    host_dram_pj_per_bit: float
    ssd_pj_per_bit: float
    source: str
    # Calibration overlay (agentx calibrate): multipliers on the default efficiencies of
    # agentx.replay.config.default_efficiencies; 1.0 = the cited defaults, nothing fitted.
    calibrated_compute_scale: float = 1.0
    calibrated_hbm_scale: float = 1.0
    calibrated_comm_scale: float = 1.0
    calibrated_floor_scale: float = 1.0
    # Serving-stack time per request outside the GPU roofline (HTTP, tokenizer, scheduler and
    # detokenizer hops), added to TTFT; 0 in the built-in catalog, fitted by agentx calibrate.
    calibrated_request_overhead_s: float = 0.0


@dataclass(frozen=True)
class ModelSpec:
    """A transformer as the cost model sees it. Parameter groups are derived from its shape."""

    name: str
    display_name: str
    hf_repo: str
    total_params: float  # vendor figure
    active_params: float  # vendor figure
    num_layers: int
    num_dense_layers: int  # layers with a dense FFN instead of MoE
    hidden_size: int
    vocab_size: int
    attention: str  # "mla" | "gqa"
    num_attention_heads: int
    num_kv_heads: int
    qk_head_dim: int  # per-head query/key width (MLA: nope + rope)
    v_head_dim: int
    kv_lora_rank: int  # MLA only (0 otherwise)
    qk_rope_head_dim: int  # MLA only (0 otherwise)
    q_lora_rank: int  # MLA only (0 = no low-rank query)
    num_local_layers: int  # sliding-window / chunked layers (KV stops growing at the window)
    local_window_tokens: int  # 0 when there are no local layers
    n_routed_experts: int  # 0 for dense models
    experts_per_token: int
    n_shared_experts: int
    moe_intermediate_size: int
    dense_intermediate_size: int
    max_context_tokens: int
    tied_embeddings: bool
    source: str
    notes: str = ""
    # What the published checkpoint ships with ("" = not stated): attention/dense weights and
    # routed-expert weights (WEIGHT_FORMATS).
    ships_weight_precision: str = ""
    ships_expert_precision: str = ""

    # -- shape -----------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_global_layers(self) -> int:
        return self.num_layers - self.num_local_layers

    # -- KV cache (NOTES.md (a); SEED-14) ------------------------------------------------------
    def kv_bytes_per_token_layer(self, kv_precision: str = "bf16") -> float:
        if self.attention == "mla":
            if kv_precision == "fp8":
                # FlashMLA "FP8 with scale": 512 B FP8 latent + 16 B scales + 128 B BF16 RoPE key.
                return 656.0
            return (self.kv_lora_rank + self.qk_rope_head_dim) * BYTES_PER_ELEMENT[kv_precision]
        return 2 * self.num_kv_heads * self.qk_head_dim * BYTES_PER_ELEMENT[kv_precision]

    def kv_bytes_per_token(self, kv_precision: str = "bf16") -> float:
        """All-layer figure (the models.csv column); past the window only global layers grow."""
        return self.num_layers * self.kv_bytes_per_token_layer(kv_precision)

    def kv_bytes(self, context_tokens, kv_precision: str = "bf16"):
        """KV bytes held for a sequence of ``context_tokens`` (array or scalar), windows applied."""
        s = np.asarray(context_tokens, dtype=np.float64)
        per = self.kv_bytes_per_token_layer(kv_precision)
        local = np.minimum(s, self.local_window_tokens) if self.num_local_layers else 0.0
        return per * (self.num_global_layers * s + self.num_local_layers * local)

    # -- parameters (per group; used for weight bytes and FLOPs) --------------------------------
    @property
    def attention_params_per_layer(self) -> float:
        h, nh = self.hidden_size, self.num_attention_heads
        if self.attention == "mla":
            q = (
                (h * self.q_lora_rank + self.q_lora_rank * nh * self.qk_head_dim)
                if self.q_lora_rank
                else h * nh * self.qk_head_dim
            )
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = (
                self.kv_lora_rank
                * nh
                * (self.qk_head_dim - self.qk_rope_head_dim + self.v_head_dim)
            )
            o = nh * self.v_head_dim * h
            return float(q + kv_a + kv_b + o)
        q = h * nh * self.qk_head_dim
        kv = 2 * h * self.num_kv_heads * self.qk_head_dim
        o = nh * self.v_head_dim * h
        return float(q + kv + o)

    @property
    def attention_params(self) -> float:
        return self.num_layers * self.attention_params_per_layer

    @property
    def dense_ffn_params(self) -> float:
        """SwiGLU FFNs of the dense (non-MoE) layers."""
        return float(self.num_dense_layers * 3 * self.hidden_size * self.dense_intermediate_size)

    @property
    def expert_params(self) -> float:
        """One routed expert in one MoE layer (SwiGLU)."""
        return float(3 * self.hidden_size * self.moe_intermediate_size)

    @property
    def routed_expert_params(self) -> float:
        return self.num_moe_layers * self.n_routed_experts * self.expert_params

    @property
    def shared_expert_params(self) -> float:
        return self.num_moe_layers * self.n_shared_experts * self.expert_params

    @property
    def router_params(self) -> float:
        return float(self.num_moe_layers * self.hidden_size * self.n_routed_experts)

    @property
    def embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    @property
    def head_params(self) -> float:
        return 0.0 if self.tied_embeddings else float(self.vocab_size * self.hidden_size)

    @property
    def computed_total_params(self) -> float:
        return (
            self.attention_params
            + self.dense_ffn_params
            + self.routed_expert_params
            + self.shared_expert_params
            + self.router_params
            + self.embedding_params
            + self.head_params
        )

    @property
    def dense_params(self) -> float:
        """Weights every token touches except routed experts and the embedding lookup."""
        return (
            self.attention_params
            + self.dense_ffn_params
            + self.shared_expert_params
            + self.router_params
        )

    @property
    def active_routed_params(self) -> float:
        return self.num_moe_layers * self.experts_per_token * self.expert_params

    @property
    def computed_active_params(self) -> float:
        """Per-token active weights (matmul), including the LM head, excluding embedding lookup."""
        return self.dense_params + self.active_routed_params + self.head_params

    def attention_flops_per_pair(self) -> float:
        """FLOPs of one (query token, key token) pair in one layer, summed over heads: QK^T and PV.

        MLA in its absorbed form scores against the 576-wide latent (kv_lora + rope) and reads
        the 512-wide latent as V; that is what FlashMLA executes in decode (NOTES.md (a)).
        """
        if self.attention == "mla":
            dk = self.kv_lora_rank + self.qk_rope_head_dim
            dv = self.kv_lora_rank
        else:
            dk, dv = self.qk_head_dim, self.v_head_dim
        return 2.0 * self.num_attention_heads * (dk + dv)


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
