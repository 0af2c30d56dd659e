"""Capacity planning: SEED-14's memory arithmetic per pipeline stage, from the footprint code.

SEED-14's 2027 design point: about 70 KB of KV per token × 2 M tokens of aggregate active
context ≈ 140 GB per pipeline stage, ≈ 280 GB double-buffered, and with weights, activations,
routing tables and headroom ≈ 400–500 GB of fast memory per stage. ``plan_stage`` sums the
per-GPU footprint terms of agentx.replay.footprint over the GPUs of one stage, so the planner
and the replay footprint cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from agentx.catalog.types import ModelSpec, ServingConfig, SystemSpec
from agentx.errors import UsageError
from agentx.replay import footprint as fp

# Fraction added on top for allocator fragmentation and paged-KV waste (up to one page per sequence
# and layer group; FlashMLA pages are 64 tokens, NOTES.md (a)) and runtime growth [E].
DEFAULT_HEADROOM = 0.05


@dataclass(frozen=True)
class StagePlan:
    """Bytes one pipeline stage needs, summed over its GPUs."""

    kv_bytes_per_token: float  # per token, for the layers this stage holds
    context_tokens: float  # aggregate active context resident in the stage
    gpus_per_stage: int
    kv_bytes: float
    prefetch_buffer_bytes: float
    weights_bytes: float  # shard + replicated, summed over the stage's GPUs
    activation_bytes: float
    routing_bytes: float
    workspace_bytes: float
    headroom_bytes: float
    total_bytes: float

    @property
    def per_gpu_bytes(self) -> float:
        return self.total_bytes / self.gpus_per_stage

    def as_rows(self) -> list[dict]:
        """(component, bytes_per_stage, bytes_per_gpu) for the byte-valued fields."""
        return [
            {
                "component": f.name.removesuffix("_bytes"),
                "bytes_per_stage": getattr(self, f.name),
                "bytes_per_gpu": getattr(self, f.name) / self.gpus_per_stage,
            }
            for f in fields(self)
            if f.name.endswith("_bytes") and f.name != "kv_bytes_per_token"
        ]


def stage_config(
    model: ModelSpec,
    *,
    system: SystemSpec | None = None,
    pp: int = 1,
    gpus_per_stage: int = 8,
    weight_precision: str = "fp8",
    kv_precision: str = "fp8",
    dp_attention: bool = False,
    prefill_chunk_tokens: int = 8192,
) -> ServingConfig:
    """One model instance of ``pp`` stages, each tensor- and expert-parallel over its GPUs.

    ``system`` only matters for HBM capacity; stage sums do not depend on it.
    """
    # system may be None: stage sums never touch it (documented above)
    return ServingConfig(
        system=system,  # type: ignore[arg-type]
        model=model,
        gpus=gpus_per_stage * pp,
        tp=gpus_per_stage,
        ep=gpus_per_stage,
        pp=pp,
        dp_attention=dp_attention,
        weight_precision=weight_precision,
        kv_precision=kv_precision,
        prefill_chunk_tokens=prefill_chunk_tokens,
    )


def plan_stage(
    context_tokens: float,
    *,
    kv_bytes_per_token: float | None = None,
    cfg: ServingConfig | None = None,
    double_buffer: bool = True,
    headroom: float = DEFAULT_HEADROOM,
) -> StagePlan:
    """SEED-14 per-stage memory: KV (+ double buffer), and with ``cfg`` weights and the rest.

    ``kv_bytes_per_token`` is what one stage holds per token (SEED-14's 70 KB); without it the
    model's KV per token for the layers of the fullest stage is used.
    """
    if context_tokens < 0 or headroom < 0:
        raise UsageError("--context-tokens and --headroom must be >= 0")
    if kv_bytes_per_token is None:
        if cfg is None:
            raise UsageError("give --kv-bytes-per-token or --model")
        share = fp.stage_layer_share(cfg.model.num_layers, cfg.pp)
        kv_bytes_per_token = cfg.kv_bytes_per_token * share
    if kv_bytes_per_token < 0:
        raise UsageError("--kv-bytes-per-token must be >= 0")
    kv = kv_bytes_per_token * context_tokens
    weights = act = routing = ws = 0.0
    gpus = 1
    if cfg is not None:
        fp.check_layout(cfg)
        gpus = cfg.gpus // cfg.pp
        # copies of each token's KV inside a stage (MLA under tensor-parallel attention: tp)
        kv *= fp.kv_share_per_gpu(cfg) * gpus / fp.stage_layer_share(cfg.model.num_layers, cfg.pp)
        shard, replicated = fp.weight_bytes_per_gpu(cfg)
        act1, routing1 = fp.activation_bytes_per_gpu(cfg)
        weights, act, routing = gpus * (shard + replicated), gpus * act1, gpus * routing1
        ws = gpus * cfg.workspace_bytes_per_gpu
    prefetch = kv if double_buffer else 0.0
    subtotal = kv + prefetch + weights + act + routing + ws
    return StagePlan(
        kv_bytes_per_token=kv_bytes_per_token,
        context_tokens=context_tokens,
        gpus_per_stage=gpus,
        kv_bytes=kv,
        prefetch_buffer_bytes=prefetch,
        weights_bytes=weights,
        activation_bytes=act,
        routing_bytes=routing,
        workspace_bytes=ws,
        headroom_bytes=subtotal * headroom,
        total_bytes=subtotal * (1 + headroom),
    )
