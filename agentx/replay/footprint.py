"""HBM footprint per GPU of a serving configuration (COST-MODEL.md §6; SEED-14, SEED-21).

Per GPU = weight shard + replicated weights + resident KV + KV prefetch buffer + activations
+ expert-parallel routing buffers + workspace. The layout rules, from NOTES.md (a) caveats:

* pipeline parallelism splits layers; the GPU of the stage with the most layers is reported;
* attention, dense FFNs and shared experts are sharded over ``tp``, or held whole on every GPU
  with data-parallel attention; routed experts are spread over ``ep`` ranks (the fullest rank
  counts); embedding and LM head are vocab-parallel over ``tp``; router weights are replicated;
* KV: each attention group of ``tp`` GPUs serves its own share of the sequences. The MLA latent
  is one vector per token, so every rank of the group holds all of it; GQA splits KV heads over
  ``min(tp, num_kv_heads)`` ranks and replicates beyond. With data-parallel attention each GPU
  holds only its own sequences' KV;
* double buffering (SEED-14): the next batch's KV is staged while the current one runs, so the
  prefetch buffer is as large as the resident KV.

``capacities_for`` sizes the KV tiers from it (HBM: what the footprint leaves; host DRAM and
SSD from the system), for agentx.kv (which re-exports it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from agentx.catalog.types import ServingConfig, ceil_div
from agentx.errors import CapacityError, UsageError
from agentx.units import GB

# Live activations of one prefill chunk, in units of chunk_tokens × hidden × activation_bytes [E]:
# residual stream, its normed copy, attention output and the tensor-parallel FFN gate/up slices
# are alive at once; ~4 covers DeepSeek/Qwen shapes at TP 8 (gate+up of DSV3's dense layers at
# TP8 alone is 2 × 18432 / 8 / 7168 = 0.64).
ACTIVATION_FACTOR = 4.0
# EP dispatch receives k copies of each token's hidden vector and combine sends them back [E];
# DeepEP-style buffers are sized for a whole chunk.
ROUTING_COPIES = 2.0
# Footprint field -> component name in tables and JSON.
COMPONENTS = {
    "weights_bytes": "weights_shard",
    "replicated_bytes": "weights_replicated",
    "kv_bytes": "kv_resident",
    "prefetch_buffer_bytes": "kv_prefetch_buffer",
    "activation_bytes": "activations",
    "routing_bytes": "routing_buffers",
    "workspace_bytes": "workspace",
    "total_bytes": "total",
    "capacity_bytes": "hbm_capacity",
    "free_bytes": "free",
}


@dataclass(frozen=True)
class Footprint:
    """Bytes per GPU, for the fullest GPU of the deployment."""

    weights_bytes: float  # this GPU's shard of the sharded weights
    replicated_bytes: float  # weights every GPU holds whole (router, dp-attention parts)
    kv_bytes: float  # resident KV cache
    prefetch_buffer_bytes: float  # next batch's KV staged while this one runs
    activation_bytes: float
    routing_bytes: float  # expert-parallel dispatch/combine buffers
    workspace_bytes: float  # runtime, collectives and GEMM workspace
    total_bytes: float
    capacity_bytes: float  # chip HBM
    free_bytes: float  # capacity − total; negative when it does not fit

    @property
    def fits(self) -> bool:
        return self.free_bytes >= 0

    def as_rows(self) -> list[dict]:
        """(component, bytes_per_gpu) rows for a footprint table, total and capacity last."""
        return [
            {"component": COMPONENTS[f.name], "bytes_per_gpu": getattr(self, f.name)}
            for f in fields(self)
        ]


def check_layout(cfg: ServingConfig) -> None:
    """Refuse layouts no deployment can have (the numbers below would be meaningless)."""
    name = f"{cfg.gpus} GPUs"
    for key in ("gpus", "tp", "pp", "ep"):
        if getattr(cfg, key) < 1:
            raise UsageError(f"--{key} must be at least 1, got {getattr(cfg, key)}")
    if cfg.gpus % (cfg.tp * cfg.pp):
        raise UsageError(f"tp {cfg.tp} × pp {cfg.pp} must divide the {name}")
    if cfg.ep * cfg.pp > cfg.gpus:
        raise UsageError(f"ep {cfg.ep} × pp {cfg.pp} exceeds the {name}")
    if cfg.pp > cfg.model.num_layers:
        raise UsageError(
            f"pp {cfg.pp} exceeds the {cfg.model.num_layers} layers of {cfg.model.name}"
        )


def stage_layer_share(num_layers: int, pp: int) -> float:
    """Fraction of the layers on the fullest pipeline stage."""
    return ceil_div(num_layers, pp) / num_layers


def weight_bytes_per_gpu(cfg: ServingConfig) -> tuple[float, float]:
    """(sharded share, replicated) weight bytes on the fullest GPU."""
    m, b = cfg.model, cfg.weight_bytes_per_param
    f = stage_layer_share(m.num_layers, cfg.pp)
    dense = (m.attention_params + m.dense_ffn_params + m.shared_expert_params) * f
    routed = f * m.num_moe_layers * ceil_div(m.n_routed_experts, cfg.ep) * m.expert_params
    routed *= cfg.expert_bytes_per_param / b  # routed experts may ship in their own format
    vocab = (
        m.embedding_params + m.head_params
        if cfg.pp == 1
        else max(m.embedding_params, m.head_params)
    )
    shard = routed + vocab / cfg.tp
    replicated = m.router_params * f
    if cfg.dp_attention:
        replicated += dense
    else:
        shard += dense / cfg.tp
    return shard * b, replicated * b


def kv_share_per_gpu(cfg: ServingConfig) -> float:
    """Fraction of the instance's KV bytes held by its fullest GPU."""
    gpus_per_stage = cfg.gpus // cfg.pp
    f = stage_layer_share(cfg.model.num_layers, cfg.pp)
    if cfg.dp_attention:
        return f / gpus_per_stage
    groups = max(1, gpus_per_stage // cfg.tp)
    split = 1 if cfg.model.attention == "mla" else min(cfg.tp, cfg.model.num_kv_heads)
    return f / groups / split


def kv_bytes_total(
    cfg: ServingConfig, kv_resident_tokens: float, sequences: float | None = None
) -> float:
    """KV bytes of the whole instance; with ``sequences`` the local-attention windows apply."""
    if sequences is None or sequences <= 0:
        return kv_resident_tokens * cfg.kv_bytes_per_token
    per_seq = cfg.model.kv_bytes(kv_resident_tokens / sequences, cfg.kv_precision)
    return float(per_seq) * sequences


def activation_bytes_per_gpu(cfg: ServingConfig) -> tuple[float, float]:
    """(activations, EP routing buffers) of one prefill chunk on one GPU."""
    m = cfg.model
    act = cfg.prefill_chunk_tokens * m.hidden_size * cfg.activation_bytes * ACTIVATION_FACTOR
    if not m.is_moe or cfg.ep == 1:
        return act, 0.0
    moe_tokens = cfg.prefill_chunk_tokens / (1 if cfg.dp_attention else cfg.tp)
    routing = (
        ROUTING_COPIES * moe_tokens * m.experts_per_token * m.hidden_size * cfg.activation_bytes
    )
    return act, routing


def footprint_per_gpu(
    cfg: ServingConfig,
    kv_resident_tokens: float,
    *,
    double_buffer: bool = True,
    sequences: float | None = None,
) -> Footprint:
    """Footprint of the fullest GPU with ``kv_resident_tokens`` of context resident in the instance."""
    check_layout(cfg)
    shard, replicated = weight_bytes_per_gpu(cfg)
    kv = kv_bytes_total(cfg, kv_resident_tokens, sequences) * kv_share_per_gpu(cfg)
    prefetch = kv if double_buffer else 0.0
    act, routing = activation_bytes_per_gpu(cfg)
    ws = cfg.workspace_bytes_per_gpu
    total = shard + replicated + kv + prefetch + act + routing + ws
    cap = cfg.chip.hbm_bytes
    return Footprint(shard, replicated, kv, prefetch, act, routing, ws, total, cap, cap - total)


def kv_capacity_bytes_per_gpu(cfg: ServingConfig) -> float:
    """HBM left for KV (resident plus any prefetch buffer) after weights, activations, workspace."""
    fp = footprint_per_gpu(cfg, 0.0)
    return fp.free_bytes


def max_resident_tokens(cfg: ServingConfig, *, double_buffer: bool = True) -> float:
    """Context tokens the instance can keep resident in HBM (all-layer KV per token)."""
    per_token = cfg.kv_bytes_per_token * kv_share_per_gpu(cfg) * (2 if double_buffer else 1)
    return max(0.0, kv_capacity_bytes_per_gpu(cfg)) / per_token


def describe(cfg: ServingConfig) -> str:
    """``8 × h200 (tp 8, ep 8, fp8)``: the layout as error messages and tables name it."""
    parts = [f"tp {cfg.tp}", f"ep {cfg.ep}"]
    if cfg.pp > 1:
        parts.append(f"pp {cfg.pp}")
    if cfg.dp_attention:
        parts.append("dp-attention")
    parts.append(cfg.weight_precision)
    where = cfg.system.name if cfg.system is not None else "GPUs"
    return f"{cfg.gpus} × {where} ({', '.join(parts)})"


def check_fits(cfg: ServingConfig) -> None:
    """Raise CapacityError when weights, activations and workspace alone exceed HBM."""
    fp = footprint_per_gpu(cfg, 0.0)
    if fp.fits:
        return
    weights = fp.weights_bytes + fp.replicated_bytes
    other = fp.activation_bytes + fp.routing_bytes + fp.workspace_bytes
    short = -fp.free_bytes
    raise CapacityError(
        f"{cfg.model.name} weights need {weights / GB:.1f} GB per GPU on {describe(cfg)}; "
        f"with {other / GB:.1f} GB of activations and workspace, {fp.capacity_bytes / GB:.1f} GB "
        f"of HBM is short by {short / GB:.1f} GB"
    )


@dataclass(frozen=True)
class TierCapacities:
    """KV bytes each tier holds for the whole instance (distinct blocks, one copy)."""

    hbm_bytes: float
    dram_bytes: float
    ssd_bytes: float
    source: str = "given"

    def tokens(self, bytes_per_token: float) -> np.ndarray:
        return np.array([self.hbm_bytes, self.dram_bytes, self.ssd_bytes]) / bytes_per_token

    def as_dict(self) -> dict:
        return asdict(self)


def capacities_for(
    cfg: ServingConfig,
    *,
    hbm_bytes: float | None = None,
    dram_bytes: float | None = None,
    ssd_bytes: float | None = None,
) -> TierCapacities:
    """HBM left after weights, activations and workspace (agentx.replay.footprint, double
    buffered per SEED-14), host DRAM per GPU × GPUs, SSD per node × nodes; each overridable."""
    for name, v in (("--hbm-kv-gb", hbm_bytes), ("--dram-gb", dram_bytes), ("--ssd-tb", ssd_bytes)):
        if v is not None and (v < 0 or not math.isfinite(v)):
            raise UsageError(f"{name} must be a non-negative number, got {v}")
    sys_ = cfg.system
    hbm = max_resident_tokens(cfg) * cfg.kv_bytes_per_token
    nodes = math.ceil(cfg.gpus / sys_.gpus_per_node)
    src = f"footprint of {cfg.gpus} × {sys_.name} serving {cfg.model.name}"
    return TierCapacities(
        hbm if hbm_bytes is None else hbm_bytes,
        sys_.host_dram_bytes * cfg.gpus if dram_bytes is None else dram_bytes,
        sys_.ssd_bytes_per_node * nodes if ssd_bytes is None else ssd_bytes,
        src if (hbm_bytes, dram_bytes, ssd_bytes) == (None, None, None) else src + ", overridden",
    )
