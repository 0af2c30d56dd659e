"""The frozen ``ModelSpec``: a transformer as the cost model sees it, loaded from the
catalog's TOML, and everything derived from its shape (KV bytes per token, parameter groups,
attention FLOPs). Importable from ``agentx.catalog.types`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentx.catalog.hardware import BYTES_PER_ELEMENT


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
