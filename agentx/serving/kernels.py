"""Kernel times measured on the engines' own kernels, where the roofline misses them.

1. Routed-MoE layers of a prefill-sized batch (``moe_kernel``, ``moe_layer_s``).
2. MLA decode attention on AMD's aiter kernels (``mla_decode_latency``, ``mla_decode_s``).
3. W4A16 MoE kernels at decode sizes, far slower than their weight read (``decode_floor_kernel``,
   ``moe_decode_s``).

All are achieved times already, so ``agentx calibrate``'s fitted scales do not rescale them.

MoE layers.

The roofline prices a MoE layer's expert GEMMs at the default compute efficiency (0.85 × the
chip's best-shape matmul rate) with 64-row tile padding. Kernel benchmarks of DeepSeek-V3's
MoE shapes (hidden 7168, expert intermediate 2048, 256 experts, top-8) show the grouped GEMMs
of a prefill-sized batch run far below that: split over 8 GPUs by tensor parallelism
("tp8 ep1") each GPU holds a 256-wide slice of every expert, so the up/gate GEMM has N = 512
and the down GEMM K = 256 per expert, shapes that leave most of a tensor core's tile idle.
At 8,192 tokens the measured layer takes 4.98 ms on H200 with TRT-LLM's CUTLASS flow against
0.59 ms of roofline, and an expert-parallel layout (whole experts per GPU) 1.28 ms.

Tables (milliseconds per MoE layer against the tokens entering the layer, balanced routing):

* NVIDIA: NVIDIA AIConfigurator's collected kernel database (ai-dynamo/aiconfigurator
  ``aic-core/src/aiconfigurator_core/systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet``
  at commit 095f58a5; rows ``hidden_size 7168, inter_size 2048, num_experts 256, topk 8,
  distribution balanced``): TRT-LLM 1.3.0rc20 (H200 ``moe_torch_flow_cutlass`` fp8_block,
  B200 ``deepgemm`` fp8_block, B200 ``moe_torch_flow_min_latency`` nvfp4 = the TRTLLM
  backend), SGLang 0.5.10 (H200 ``sglang_fused_moe_triton`` fp8_block) and vLLM 0.24.0's
  FlashInfer TRT-LLM-gen MoE on B200/B300 (fp8_block, nvfp4), the kernel SGLang's
  ``flashinfer_trtllm`` MoE runner calls; for Kimi K2's W4A16 experts vLLM 0.24.0's Marlin (H200)
  and SGLang 0.5.14's FlashInfer TRT-LLM-gen MXINT4 MoE (B200), also at decode sizes.
* AMD MI355X: aiter's own tuning records (Kimi K2: ``kimik2_fp4_tuned_fmoe.csv``, 384 experts) of its fused-MoE kernels for DeepSeek-V3 (ROCm/aiter
  ``aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv`` MXFP4 and
  ``a8w8_blockscale_tuned_fmoe_ds_v3.csv`` FP8 block-scale, ``cu_num 256``, column ``us``; the
  per-GPU expert slice ``inter_dim`` 256 is tp8, 512 tp4). aiter fuses the shared expert into
  the kernel (257 experts, top-9), so 8/9 of its time is the routed experts'. Its FP8 tp8
  records above 1,024 tokens repeat the 1,024-token entry and are not used.
* AMD MI300X (gfx942, ``cu_num 304``; SGLang with ``SGLANG_USE_AITER=1`` calls aiter's
  ``fused_moe`` with ``QuantType.per_128x128`` for block-scale FP8 experts, sgl-project/sglang
  ``python/sglang/srt/layers/quantization/fp8.py``): aiter has no record of DeepSeek-V3's tp8
  expert slice there; its nearest is GLM-5.1's (ROCm/aiter#3422, ``a8w8_blockscale_tuned_fmoe_glm5_1.csv``:
  the same FP8 block-scale 1-stage fused MoE on the same per-GPU slice, ``inter_dim`` 256, 257
  experts, top-9, hidden 6144 instead of 7168; tuned on MI325X, the same 304-CU gfx942 die with
  more bandwidth and power, so a lower bound for MI300X). Every expert GEMM's FLOPs and weight
  bytes scale with the hidden size, so its time × 7168 / 6144 (the same FLOP rate) is used. At
  16-256 tokens that time is 0.85-0.93 of the routed weight read the roofline charges on
  MI300X, so like the other W8A8 tables it sets no decode floor (docs/validation.md, round 8).

Between table points the time is interpolated linearly in tokens; outside them it scales with
tokens from the nearest point (same FLOP rate), and at decode sizes the weight-read roofline
still takes over (``iteration_cost`` keeps the max). Engines and layouts without a table keep
the roofline.
"""

from __future__ import annotations

import numpy as np

TOKENS = (1024, 2048, 4096, 8192, 16384)
_AIC = "AIConfigurator 095f58a5 moe_perf"
_AITER_FP4 = "ROCm/aiter e4048607 dsv3_fp4_tuned_fmoe.csv"
_AITER_FP8 = "ROCm/aiter e4048607 a8w8_blockscale_tuned_fmoe_ds_v3.csv"
_AITER_GFX942 = "ROCm/aiter e4048607 a8w8_blockscale_tuned_fmoe_glm5_1.csv (gfx942, cu_num 304)"
_MI300X = "aiter-mi300x-fp8"

# (table, (moe_tp, moe_ep)) -> ms per layer at TOKENS (None: not measured). Routed experts only.
_MS: dict[tuple[str, tuple[int, int]], tuple] = {
    ("aic-trt-h200-fp8-cutlass", (8, 1)): (1.086, 1.5021, 2.5514, 4.98, 9.6608),
    ("aic-trt-h200-fp8-cutlass", (4, 1)): (1.3687, 1.834, 2.9716, 5.6072, 11.0285),
    ("aic-trt-h200-fp8-cutlass", (1, 8)): (0.4454, 0.5259, 0.7258, 1.2844, 2.4992),
    ("aic-trt-h200-fp8-cutlass", (1, 4)): (0.8558, 1.0218, 1.3997, 2.4802, 4.9569),
    ("aic-trt-b200-fp8-deepgemm", (8, 1)): (0.5109, 0.6078, 0.8012, 1.4381, 2.7362),
    ("aic-trt-b200-fp8-deepgemm", (4, 1)): (0.711, 0.8081, 1.0031, 1.6539, 3.0803),
    ("aic-trt-b200-fp8-deepgemm", (1, 8)): (0.2904, 0.3126, 0.3561, 0.5018, 0.8547),
    ("aic-trt-b200-fp8-deepgemm", (1, 4)): (0.5377, 0.5698, 0.6374, 0.8987, 1.5739),
    ("aic-trt-b200-nvfp4-trtllm", (8, 1)): (0.1548, 0.1846, 0.2435, 0.4212, 0.8069),
    ("aic-trt-b200-nvfp4-trtllm", (4, 1)): (0.2127, 0.2447, 0.3375, 0.5725, 1.0945),
    ("aic-trt-b200-nvfp4-trtllm", (1, 8)): (0.2328, 0.3317, 0.522, 0.9571, 1.8568),
    ("aic-trt-b200-nvfp4-trtllm", (1, 4)): (0.4134, 0.4533, 0.6538, 1.1488, 2.2067),
    ("aic-sglang-h200-fp8-triton", (8, 1)): (0.5883, 0.7084, 1.1822, 2.2181, 4.4405),
    ("aic-sglang-h200-fp8-triton", (4, 1)): (0.9964, 1.082, 1.9811, 3.1948, 5.9114),
    ("aic-sglang-h200-fp8-triton", (1, 8)): (1.2268, 2.1432, 4.1536, 8.5405, 16.306),
    ("aic-sglang-h200-fp8-triton", (1, 4)): (1.5357, 2.3764, 4.272, 9.5077, 16.4859),
    # aiter (µs / 1000, × 8/9 for the fused shared expert applied in moe_layer_s).
    ("aiter-mi355x-mxfp4", (8, 1)): (0.21379, 0.29851, 0.47591, 0.78908, 1.45287),
    ("aiter-mi355x-mxfp4", (4, 1)): (0.31786, 0.46302, 0.70886, 1.17029, 2.09195),
    ("aiter-mi355x-fp8", (8, 1)): (0.35948, None, None, None, None),
    ("aiter-mi355x-fp8", (4, 1)): (0.67368, 0.87359, 1.29401, 2.30585, None),
    # GLM-5.1's slice (hidden 6144) on gfx942 / cu_num 304, as recorded; × WIDTH_SCALE below
    (_MI300X, (8, 1)): (0.353377, 0.547545, 0.8093871, 1.3139702, 2.2284179),
    # Kimi K2 (384 experts, top-8), W4A16 Marlin MoE as AIConfigurator collected it through vLLM
    # 0.24.0 (h200_sxm/moe/vllm/0.24.0, vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts;
    # the runs used v0.21.0). Its 0.18.0 / 0.19.0 collections are 1.5-4.8x slower than this one
    # (1.8x at 8,192 tokens), vLLM 0.14.0's and SGLang 0.5.10 / 0.5.14's (4.0-4.3 ms at 8,192)
    # and, at decode sizes, alone exceed rows 68-70's measured TPOT: not used.
    ("aic-vllm-h200-kimi-int4-marlin", (8, 1)): (0.8569, 1.1376, 2.7755, 4.3369, 8.5942),
    # Kimi K2 (384 experts, top-8; aiter kimik2_fp4_tuned_fmoe.csv, shared fused: 385 / top-9)
    ("aiter-mi355x-kimi-mxfp4", (8, 1)): (0.28984, 0.39535, 0.56203, 0.88684, 1.54195),
    ("aiter-mi355x-kimi-mxfp4", (4, 1)): (0.48101, 0.62734, 0.83518, 1.22081, 2.04467),
    # FlashInfer's TRT-LLM-gen block-scale MoE, the kernel SGLang's ``--moe-runner-backend
    # flashinfer_trtllm`` calls, as AIConfigurator collected it through vLLM 0.24.0's FlashInfer
    # TRT-LLM path (kernel_source ``vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic``
    # fp8_block, ``vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4experts
    # monolithic`` nvfp4; one record per point)
    ("aic-fi-b200-fp8-trtllm", (8, 1)): (0.3979, 0.4596, 0.6409, 1.2342, 2.4127),
    ("aic-fi-b200-fp8-trtllm", (4, 1)): (0.6582, 0.7264, 0.9916, 1.9335, 3.809),
    ("aic-fi-b200-fp8-trtllm", (1, 8)): (0.661, 1.0903, 2.0658, 4.0829, 8.1376),
    ("aic-fi-b200-fp8-trtllm", (1, 4)): (0.8659, 1.3112, 2.4193, 4.7744, 9.5166),
    ("aic-fi-b300-fp8-trtllm", (8, 1)): (0.3838, 0.4468, 0.6092, 1.1672, 2.2872),
    ("aic-fi-b300-fp8-trtllm", (4, 1)): (0.6366, 0.7055, 0.9381, 1.8263, 3.6055),
    ("aic-fi-b300-fp8-trtllm", (1, 8)): (0.6336, 1.038, 1.95, 3.8493, 7.6984),
    ("aic-fi-b300-fp8-trtllm", (1, 4)): (0.9039, 1.2635, 2.2895, 4.5235, 9.0436),
    ("aic-fi-b300-nvfp4-trtllm", (8, 1)): (0.2309, 0.2795, 0.3798, 0.591, 1.1313),
    ("aic-fi-b300-nvfp4-trtllm", (4, 1)): (0.3153, 0.3677, 0.4695, 0.7394, 1.4142),
    ("aic-fi-b300-nvfp4-trtllm", (1, 8)): (0.2534, 0.3644, 0.5889, 1.0717, 2.0779),
    ("aic-fi-b300-nvfp4-trtllm", (1, 4)): (0.4373, 0.4958, 0.7328, 1.2781, 2.5478),
    # Kimi K2 (384 experts, top-8), FlashInfer's TRT-LLM-gen MXINT4 W4A16 MoE
    # (trtllm_mxint4_block_scale_moe, BF16 activations) as AIConfigurator collected it through
    # SGLang 0.5.14 (b200_sxm/moe/sglang/0.5.14, kernel_source sglang_flashinfer_trtllm_moe,
    # int4_wo; one record per point; its tp1 ep8 records fall at 2,048 tokens, not used)
    ("aic-fi-b200-kimi-int4-trtllm", (8, 1)): (0.6967, 0.7445, 0.8588, 1.3288, 2.6063),
    ("aic-fi-b200-kimi-int4-trtllm", (4, 1)): (1.3032, 1.3658, 1.5184, 2.357, 4.6683),
    ("aic-fi-b200-kimi-int4-trtllm", (1, 4)): (0.7184, 0.7229, 1.4146, 2.1761, 4.2778),
}
# W4A16 MoE kernels (INT4 weights, BF16 activations: every weight is converted in the kernel)
# at decode sizes, ms per layer at DECODE_TOKENS (same collections). Against the weight-read
# roofline (70 % of HBM) at 16-256 tokens, tp8: FlashInfer MXINT4 1.7-2.3x, Marlin 1.4-1.8x;
# the W8A8 / W4A4 kernels of these tables 0.7-1.2x (Hopper FP8 block-scale 1.2-1.8x).
DECODE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_FI_INT4, _MARLIN = "aic-fi-b200-kimi-int4-trtllm", "aic-vllm-h200-kimi-int4-marlin"
# Tables measured on a narrower model than the one they price: time × this (FLOPs and bytes).
WIDTH_SCALE = {_MI300X: 7168.0 / 6144.0}
_DECODE = {
    _FI_INT4: {
        (8, 1): (0.0391, 0.0411, 0.049, 0.0802, 0.1409, 0.2409, 0.3552, 0.3577, 0.363, 0.6741),
        (4, 1): (0.041, 0.0488, 0.0777, 0.1329, 0.2349, 0.4349, 0.6431, 0.644, 0.6497, 1.2672),
        (1, 4): (0.0403, 0.0488, 0.0787, 0.1317, 0.2293, 0.4229, 0.6218, 0.6233, 0.6349, 0.6635),
    },
    _MARLIN: {
        (8, 1): (0.0407, 0.0537, 0.0757, 0.1105, 0.1819, 0.3021, 0.4665, 0.4772, 0.4901, 0.5472),
    },
}
_DECODE_MS = {(t, split): ms for t, d in _DECODE.items() for split, ms in d.items()}
SOURCES = {
    "aic": _AIC,
    "aiter-mi355x-mxfp4": _AITER_FP4,
    "aiter-mi355x-fp8": _AITER_FP8,
    "aiter-mi355x-kimi-mxfp4": "ROCm/aiter e4048607 kimik2_fp4_tuned_fmoe.csv",
    _MI300X: _AITER_GFX942,
}
SHARED_IN_KERNEL = 8.0 / 9.0  # aiter fuses the shared expert: routed share of its FLOPs

# (engine, hardware, routed-expert format) -> table; what each launch script runs
# (InferenceX benchmarks/single_node/fixed_seq_len/dsr1_*.sh): TRT-LLM H200 MOE_BACKEND=CUTLASS,
# B200 TRTLLM (FP8 block-scale: DeepGEMM's table, the FP8 block-scale kernel AIConfigurator
# collected for TRT-LLM on B200, the nearest measured); SGLang B200/B300 --moe-runner-backend
# flashinfer_trtllm: FlashInfer's TRT-LLM-gen MoE (measured through vLLM's FlashInfer path;
# NVFP4 on B200 through TRT-LLM's own trtllm-gen table), H200 the Triton fused MoE; ATOM and
# SGLang on MI355X aiter's fused MoE.
# vLLM on MI355X (Kimi K2.5 MXFP4) runs aiter's fused MoE too (VLLM_ROCM_USE_AITER=1 with
# the shared expert fused, kimik2.5_fp4_mi355x.sh); vLLM on H200 runs Kimi's W4A16 experts on
# Marlin (kimik2.5_int4_h200.sh sets no MoE backend). On B200 the INT4 recipe selects FlashInfer's
# INT4 MoE (VLLM_USE_FLASHINFER_MOE_INT4=1, in force since 2026-03-27; vLLM's
# flashinfer_trtllm_mxint4_moe, vllm-project/vllm#32437), the trtllm_mxint4_block_scale_moe that
# SGLang's flashinfer_trtllm runner calls for the same checkpoint (sgl-project/sglang#16892).
_DSV3 = "deepseek-v3"
_ENGINE_TABLE = {
    ("trt", "h200", _DSV3, "fp8"): "aic-trt-h200-fp8-cutlass",
    ("trt", "b200", _DSV3, "fp8"): "aic-trt-b200-fp8-deepgemm",
    ("trt", "b200", _DSV3, "nvfp4"): "aic-trt-b200-nvfp4-trtllm",
    ("sglang", "h200", _DSV3, "fp8"): "aic-sglang-h200-fp8-triton",
    ("sglang", "b200", _DSV3, "fp8"): "aic-fi-b200-fp8-trtllm",
    ("sglang", "b300", _DSV3, "fp8"): "aic-fi-b300-fp8-trtllm",
    ("sglang", "b300", _DSV3, "nvfp4"): "aic-fi-b300-nvfp4-trtllm",
    ("sglang", "b200", _DSV3, "nvfp4"): "aic-trt-b200-nvfp4-trtllm",
    ("sglang", "mi355x", _DSV3, "mxfp4"): "aiter-mi355x-mxfp4",
    ("atom", "mi355x", _DSV3, "mxfp4"): "aiter-mi355x-mxfp4",
    ("sglang", "mi355x", _DSV3, "fp8"): "aiter-mi355x-fp8",
    ("atom", "mi355x", _DSV3, "fp8"): "aiter-mi355x-fp8",
    ("sglang", "mi300x", _DSV3, "fp8"): _MI300X,
    ("vllm", "mi355x", "kimi-k2", "mxfp4"): "aiter-mi355x-kimi-mxfp4",
    ("vllm", "h200", "kimi-k2", "int4"): "aic-vllm-h200-kimi-int4-marlin",
    ("vllm", "b200", "kimi-k2", "int4"): "aic-fi-b200-kimi-int4-trtllm",
}


def moe_kernel(
    framework: str, hardware: str, model: str, expert_format: str, tp: int, ep: int
) -> tuple[str, tuple[int, int]] | None:
    """(table, (moe_tp, moe_ep)) measured for this engine and layout, or None (roofline).
    ``ep`` 1 means experts sliced over the ``tp`` GPUs; otherwise whole experts per GPU."""
    table = _ENGINE_TABLE.get((framework, hardware, model, expert_format))
    if table is None:
        return None
    split = (tp, 1) if ep <= 1 else (max(tp // ep, 1), ep)
    return (table, split) if (table, split) in _MS else None


def moe_layer_s(kernel: tuple[str, tuple[int, int]], tokens) -> np.ndarray:
    """Seconds of one MoE layer's routed experts for ``tokens`` entering it (arrays)."""
    ms = _MS[kernel]
    pts = [(n, t) for n, t in zip(TOKENS, ms, strict=True) if t is not None]
    n_k = np.array([n for n, _ in pts], dtype=np.float64)
    t_k = np.array([t for _, t in pts], dtype=np.float64)
    n = np.asarray(tokens, dtype=np.float64)
    inside = np.interp(n, n_k, t_k)
    # Outside the measured range: the FLOP rate of the nearest measured point.
    below = t_k[0] * n / n_k[0]
    above = t_k[-1] * n / n_k[-1]
    t = np.where(n < n_k[0], below, np.where(n > n_k[-1], above, inside))
    share = SHARED_IN_KERNEL if kernel[0].startswith("aiter") else 1.0
    return 1e-3 * share * WIDTH_SCALE.get(kernel[0], 1.0) * t


MEASURED_MOE_LAUNCHES = 2  # router top-k + fused MoE: of the per-layer floors (stages.KERNELS_MOE)


def decode_floor_kernel(kernel: tuple[str, tuple[int, int]] | None):
    """The kernel's own decode-size records where its table has them (``_DECODE_MS``), or None.

    Only the W4A16 kernels carry them: Kimi K2 tp8 at 64 tokens FlashInfer's MXINT4 kernel
    takes 0.355 ms per layer on B200 for ~0.88 GB of distinct experts per GPU (2.5 TB/s, 31 % of
    HBM) and Marlin 0.467 ms on H200 (1.9 TB/s, 39 %); docs/validation.md, round 7."""
    return kernel if kernel in _DECODE_MS else None


def moe_decode_s(kernel: tuple[str, tuple[int, int]], tokens, floor_s: float) -> np.ndarray:
    """Seconds one MoE layer's routed experts take at least at decode sizes (measured, linear
    between DECODE_TOKENS, flat beyond them), less the launch floors ``iteration_cost`` already
    charges for the kernels the measurement holds (router top-k and the fused MoE call)."""
    t = np.interp(np.asarray(tokens, dtype=np.float64), DECODE_TOKENS, _DECODE_MS[kernel])
    share = SHARED_IN_KERNEL if kernel[0].startswith("aiter") else 1.0
    return np.maximum(1e-3 * share * t - MEASURED_MOE_LAUNCHES * floor_s, 0.0)


# aiter's MLA decode kernel (every AMD recipe runs it: SGLang --attention-backend aiter, ATOM,
# vLLM's ROCm AITER MLA) takes, for a single sequence, a fixed time plus the time to stream
# that sequence's latent cache through its split-KV work units; at small batches that latency,
# not the chip's bandwidth, sets the layer's attention time. MI355X, aiter ASM kernel, FP8 KV
# (ROCm/aiter#3072, batch 1: 29.8 µs at 8,192 tokens of context, 52.5 µs at 23,333): 17.5 µs
# + 1.50 ns per context token. Cross-checks: ROCm/aiter#3003 (MI355X, 32 heads × 4 query
# tokens) 20.0 µs at 1,024 and 33.0 µs at 8,192; ROCm/aiter#2039 (ASM, batch 1, 21 tokens)
# 12.1 µs on MI355X and 15.5 µs on MI300X, 1.28× slower on MI300X, the ratio used for MI300X
# (an estimate: no long-context MI300X figure was found).
MLA_DECODE_LATENCY = {
    "mi355x": (17.5e-6, 1.50e-9),
    "mi300x": (1.28 * 17.5e-6, 1.28 * 1.50e-9),
}


def mla_decode_latency(hardware: str, model_attention: str) -> tuple[float, float] | None:
    """(fixed seconds, seconds per context token) of one MLA decode kernel call, or None."""
    return MLA_DECODE_LATENCY.get(hardware) if model_attention == "mla" else None


def mla_decode_s(latency: tuple[float, float], context_tokens, layers: int, floor_s: float):
    """Seconds per pass that the decode-attention kernels need at least (one call per layer),
    less the launch floor ``iteration_cost`` already charges for each call."""
    t0, per_token = latency
    c = np.asarray(context_tokens, dtype=np.float64)
    return layers * np.maximum(t0 + per_token * c - floor_s, 0.0)
