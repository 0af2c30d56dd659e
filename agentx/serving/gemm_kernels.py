"""Attention-projection GEMM times measured on the engine's own block-scale FP8 kernel.

The roofline prices a layer's linear layers at the default compute efficiency (0.85 × the
chip's best-shape matmul rate; 1,143 TFLOP/s in FP8 on MI300X, whose catalog entry has no FP8
MAMF figure and takes the BF16 fraction). On MI300X every DeepSeek-V3 projection runs aiter's
FP8 block-scale (1×128 activations, 128×128 weights) GEMM, and its tuning records for the
projections of one tensor-parallel (tp8) layer reach 818 TFLOP/s at 8,192 rows and 532 at
1,024 (aiter's own measurement, column ``us``).

Source: ROCm/aiter @ e4048607, ``aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv``,
rows ``gfx942``, ``cu_num 304``, the DeepSeek-V3.2 TP8 shapes (ROCm/aiter#3951; same MLA
projections as V3). It was tuned on MI325X, the same 304-CU gfx942 die with more bandwidth and
power than MI300X, so these times are a lower bound for MI300X (ROCm/aiter#3852 reports these
shapes falling back to aiter's untuned default on MI300X). SGLang's ROCm path calls aiter's
``gemm_a8w8_blockscale`` (CK, the kernel of these records) or, in some versions, its Triton
twin, which sgl-project/sglang#14043 measured slower on MI300X: a lower bound either way.
Per GPU and layer, ``N×K``:

* ``2112×7168``: SGLang's fused q_a + kv_a projection (1,536 + 576 outputs), replicated on
  every GPU (the layout counts it once per GPU too);
* ``3072×1536``: q_b (16 of 128 heads × 192); ``4096×512``: kv_b (16 heads × 256);
* ``7168×2048``: o_proj (16 heads × 128 in).

Their summed time per layer, less the launch floors already charged for the four calls,
replaces the roofline math of those projections for the tokens of a pass (rows M); between
table points it is linear in M. At M ≤ 16 the records are flat (a
weight read and a launch: 7168×2048 takes 8.10 / 8.11 / 7.95 / 8.37 µs at M = 2 / 4 / 8 / 16),
so fewer rows keep the 16-row time; beyond the last point the time scales with M (that point's
FLOP rate). ``iteration_cost`` still takes the weight-read bound where it is larger, as with
the MoE tables (``agentx.serving.kernels``). The head (LM head) stays on the roofline.
"""

from __future__ import annotations

import numpy as np

M_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_MI300X = "aiter-mi300x-fp8-blockscale-tp8"
SOURCE = "ROCm/aiter e4048607 a8w8_blockscale_tuned_gemm_ds_v3.csv (gfx942, cu_num 304)"

# table -> {(N, K): µs at M_TOKENS}: one tp8 DeepSeek-V3 layer's attention projections.
_US = {
    _MI300X: {
        (2112, 7168): (
            *(11.9346, 12.7368, 16.4758, 19.7518, 26.7667, 33.9281),
            *(57.3845, 88.6335, 146.9197, 291.6331, 544.7849, 1348.5752),
        ),
        (3072, 1536): (
            *(6.7699, 6.7891, 6.6606, 7.987, 9.3899, 15.2596),
            *(21.7857, 37.0034, 59.8855, 106.0009, 195.4204, 419.8913),
        ),
        (4096, 512): (
            *(3.5967, 3.5831, 4.2628, 4.2921, 5.9946, 7.8973),
            *(13.1124, 21.5567, 40.2445, 66.7474, 120.8238, 267.7638),
        ),
        (7168, 2048): (
            *(8.3748, 8.9651, 11.0504, 11.7098, 20.2647, 31.4507),
            *(48.8258, 78.7607, 144.2936, 268.976, 501.8788, 1205.4161),
        ),
    },
}
# (engine, hardware, model, weight format, attention tp) -> table; the MI300X recipe
# (InferenceX dsr1_fp8_mi300x.sh) runs SGLang with SGLANG_USE_AITER=1 on tp8.
_ENGINE_TABLE = {("sglang", "mi300x", "deepseek-v3", "fp8", 8): _MI300X}


def attn_gemm_kernel(
    framework: str, hardware: str, model: str, weight_format: str, tp: int, dp_attention: bool
) -> str | None:
    """The measured projection table for this engine and attention layout, or None (roofline)."""
    if dp_attention:
        return None
    return _ENGINE_TABLE.get((framework, hardware, model, weight_format, tp))


def layer_us(kernel: str) -> np.ndarray:
    """One layer's projection time at M_TOKENS, µs (the sum over its GEMMs)."""
    return np.sum(np.array(list(_US[kernel].values()), dtype=np.float64), axis=0)


def attn_gemm_layer_s(kernel: str, rows, floor_s: float = 0.0) -> np.ndarray:
    """Seconds of one layer's attention projections for ``rows`` tokens (arrays), less the
    launch floors ``iteration_cost`` already charges for their GEMM calls (``floor_s`` each)."""
    m_k = np.array(M_TOKENS, dtype=np.float64)
    t_k = layer_us(kernel)
    m = np.asarray(rows, dtype=np.float64)
    t = np.where(m > m_k[-1], t_k[-1] * m / m_k[-1], np.interp(m, m_k, t_k))
    return np.maximum(1e-6 * t - len(_US[kernel]) * floor_s, 0.0)
