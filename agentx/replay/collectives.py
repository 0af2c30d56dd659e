"""Collectives of one forward pass: their latency floor, and the FFN all-reduce bytes.

At decode batch sizes a TP all-reduce or an EP dispatch/combine moves tens to hundreds of
kilobytes: its time is set by the per-step latency of the collective, not by link bandwidth,
and the rooflines price the bandwidth part only (plus one generic kernel floor per small
kernel, collectives included). This module adds, per collective, the part of the latency
above that kernel floor. Both the replay closed forms (``agentx.replay.stages``, through
``_floor_per_pass``, and so the compiled pricing kernel) and the serving iteration
(``agentx.serving.iteration``) charge it, and the FFN all-reduce bytes, from here.

Latency model: NCCL's own tuning model (NVIDIA/nccl ``src/graph/tuning.cc``, read at commit
01afd20a77b5804e0ecf1042509dd9d20ebf9e93): a Ring/LL collective costs
``baseLat + steps · hwLat`` with baseLat = 3.6 µs, hwLat = 0.47 µs per step over NVLink and
2.7 µs over the network, ``steps = 2(n − 1)`` for an all-reduce and ``n`` for the other
collectives. For 8 GPUs over NVLink that is 10.2 µs per all-reduce (4 GPUs: 6.4 µs); measured
8-GPU small-message all-reduces lie around it (NVIDIA/nccl-tests#123: 33.7 µs on DGX-A100,
Ring LL one channel, no CUDA graph; NVIDIA/nccl#1940: 2.3 µs (H200) / 3 µs (B200) for 8 bytes
with NCCL 2.27 symmetric memory, the tuned floor). Custom one-shot all-reduces of vLLM,
SGLang and TRT-LLM sit in the same range.

Collectives per layer (the TRT-LLM / SGLang / vLLM layer graphs):

* tensor-parallel attention (``att_tp > 1``): one all-reduce of the attention output;
* dense FFN layers under tensor parallelism: one all-reduce;
* MoE layers: dispatch + combine over the ``ep`` ranks when ``ep > 1`` (two collectives of
  ``n`` steps), else one all-reduce of the tensor-parallel experts' output when ``tp > 1``.

A pipeline stage runs ``layers / pp`` layers, so a token crosses every layer's collectives
once per pass whatever ``pp`` is (like the kernel floors).
"""

from __future__ import annotations

from agentx.catalog.types import ServingConfig
from agentx.replay.config import layout

BASE_LAT_S = 3.6e-6  # Ring / LL base latency (tuning.cc baseLat)
HW_LAT_NVLINK_S = 0.47e-6  # per step over NVLink (tuning.cc hwLat NVLINK Ring LL)
HW_LAT_NET_S = 2.7e-6  # per step over the network (tuning.cc hwLat NET Ring LL)


def collective_latency_s(ranks: int, steps: int, scale_up_domain_gpus: int) -> float:
    """NCCL Ring/LL latency of one collective over ``ranks`` GPUs taking ``steps`` steps."""
    if ranks <= 1:
        return 0.0
    hw = HW_LAT_NVLINK_S if ranks <= scale_up_domain_gpus else HW_LAT_NET_S
    return BASE_LAT_S + steps * hw


def all_reduce_latency_s(ranks: int, scale_up_domain_gpus: int) -> float:
    return collective_latency_s(ranks, 2 * (ranks - 1), scale_up_domain_gpus)


def all_to_all_latency_s(ranks: int, scale_up_domain_gpus: int) -> float:
    return collective_latency_s(ranks, ranks, scale_up_domain_gpus)


def ffn_all_reduce_layers(cfg: ServingConfig) -> int:
    """Layers whose FFN output is all-reduced over ``tp`` ranks: dense FFN layers under
    tensor-parallel attention, and MoE layers whose experts are tensor-parallel (``ep == 1``)."""
    lay, m = layout(cfg), cfg.model
    if cfg.tp <= 1:
        return 0
    dense = (m.num_layers - m.num_moe_layers) if lay.att_tp > 1 else 0
    moe = m.num_moe_layers if (m.is_moe and cfg.ep <= 1) else 0
    return dense + moe


def ffn_all_reduce_bytes(cfg: ServingConfig, tokens):
    """Ring all-reduce bytes of the FFN outputs (whole instance): ``2(tp − 1)·h·b`` per token
    and layer, the same form as the attention output's (``replay.stages._tp_bytes``)."""
    layers = ffn_all_reduce_layers(cfg)
    h, b = cfg.model.hidden_size, cfg.activation_bytes
    return tokens * (2.0 * (cfg.tp - 1) * h * b * layers)


def _collective_floor_parts(cfg: ServingConfig) -> tuple[float, float, float]:
    """Seconds per forward pass above the kernel floors: (attention-output all-reduces,
    FFN-output all-reduces, MoE dispatch + combine)."""
    lay, m = layout(cfg), cfg.model
    dom = cfg.system.scale_up_domain_gpus
    floor = lay.eff.kernel_floor_s  # each collective already pays one kernel floor
    scale = cfg.system.calibrated_floor_scale

    def above(lat: float) -> float:
        return max(lat * scale - floor, 0.0) if lat > 0 else 0.0

    attention = m.num_layers * above(all_reduce_latency_s(lay.att_tp, dom))
    ffn = ffn_all_reduce_layers(cfg) * above(all_reduce_latency_s(cfg.tp, dom))
    moe = 0.0
    if m.is_moe and cfg.ep > 1:
        moe = m.num_moe_layers * 2.0 * above(all_to_all_latency_s(cfg.ep, dom))
    return attention, ffn, moe


def collective_floor_s(cfg: ServingConfig) -> float:
    """Seconds per forward pass that the collectives' latency adds above the kernel floors."""
    attention, ffn, moe = _collective_floor_parts(cfg)
    return attention + ffn + moe


def collective_floors_s(cfg: ServingConfig) -> tuple[float, float]:
    """``collective_floor_s`` split as replay splits a pass: (attention side, FFN/expert side)."""
    attention, ffn, moe = _collective_floor_parts(cfg)
    return attention, ffn + moe
