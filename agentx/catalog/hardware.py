"""Number formats and the hardware specs: precisions, stored weight formats and their bytes
per element, and the frozen ``ChipSpec`` (one accelerator, per GPU) and ``SystemSpec`` (a chip
deployed in a system: scale-up domain, networks, host memory, SSD) loaded from the catalogs'
TOML. Importable from ``agentx.catalog.types`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass

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
