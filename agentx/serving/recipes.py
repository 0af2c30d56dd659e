"""Engine settings of the measured InferenceX runs, read from the launch scripts they ran.

Each InferenceX point was served by a shell recipe (``benchmarks/single_node/dsr1_*.sh`` in
SemiAnalysisAI/InferenceX; the versions of 2025-11 and 2026-05 agree on every setting used
here, e.g. commit d2ee68c7, 2026-05-19). Three of its settings change what the client
measures, so the serving model takes them per row instead of assuming engine defaults:

* **KV cache dtype.** SGLang on B200/B300/MI300X/MI355X passes ``--kv-cache-dtype fp8_e4m3``,
  TRT-LLM ``kv_cache_config.dtype: fp8``, ATOM ``--kv_cache_dtype fp8``, vLLM Kimi-K2.5 NVFP4
  on B200 ``--kv-cache-dtype fp8``; SGLang on H200 and the other vLLM recipes leave "auto"
  (the model dtype, BF16).
* **KV pool size.** SGLang sizes weights + KV pool as ``--mem-fraction-static`` of the GPU's
  memory (0.85 DSR1 FP4; 0.82 DSR1 FP8 TP8, 0.95 TP4; 0.8 on AMD); TRT-LLM gives the KV cache
  ``free_gpu_memory_fraction`` of what weights and activations leave (0.8 B200, 0.75 H200);
  vLLM sizes everything as ``--gpu-memory-utilization`` (0.9) of the memory. "The memory" is
  what the runtime reports, not the marketing figure: a B200 reports 183,359 MiB
  (= 192.3 GB; nvidia-smi in NVIDIA/TensorRT-LLM#10278), against the 180 GB of the catalog.
* **Admission cadence.** New requests join the running batch only every K iterations:
  SGLang's ``--scheduler-recv-interval`` (30 at concurrency ≥ 16, else 10, in the B200/B300
  recipes; 1 with DP attention) polls the tokenizer only after K decode iterations
  (``SchedulerRecvSkipper``: decode weight 1, any prefill resets; sgl-project/sglang
  ``managers/scheduler_recv_skipper.py``); TRT-LLM with attention DP and
  ``attention_dp_config: enable_balance: true, timeout_iters: 60, batching_wait_iters: 0``
  holds context requests until every DP rank has one or 60 iterations pass, whenever every rank
  is decoding (``PyExecutor._balance_adp_requests``, NVIDIA/TensorRT-LLM
  ``_torch/pyexecutor/py_executor.py``).

* **Eager prefill.** A prefill pass that is not CUDA-graph captured is launched op by op from
  Python, and for a DeepSeek-V3 forward that host work outlasts small prefills: SGLang logs
  82.6 ms per eager prefill forward of DeepSeek-V3 with a handful of new tokens against 23.1 ms
  for the same pass replayed from a CUDA graph (sgl-project/sglang#12160; "prefill latency is
  similar when new_tokens < 100"). SGLang prefill is eager in these recipes (piecewise CUDA
  graphs are opt-in, ``--enable-piecewise-cuda-graph``, and the B200 FP4 recipe passes
  ``--disable-piecewise-cuda-graph``); the floor scales with the layer count
  (82.6 ms / 61 layers).

``stream_interval`` (10 or 30 in these recipes) does not delay the first token: SGLang streams
when ``len(output_ids) % interval == 1`` and TRT-LLM when ``py_decoding_iter == 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2
# Host floor of one eager prefill forward, per layer (sglang#12160: 82.6 ms, 61 layers).
EAGER_PREFILL_S_PER_LAYER = 82.6e-3 / 61
# Total device memory as the runtime reports it (what the engines' fractions multiply).
RUNTIME_MEMORY_BYTES = {
    "b200": 183_359 * MIB,  # nvidia-smi "183359MiB", NVIDIA/TensorRT-LLM#10278
}


@dataclass(frozen=True)
class Recipe:
    """Engine settings of one measured run (defaults: engine defaults, agentx footprint)."""

    kv_precision: str = "bf16"
    # "static": fraction × memory − weights (SGLang); "free": fraction × (memory − weights −
    # activations) (TRT-LLM); "utilization": fraction × memory − weights − activations (vLLM);
    # "": agentx's own footprint (catalog HBM minus weights, activations, workspace).
    pool_rule: str = ""
    memory_fraction: float = 1.0
    admission_interval_iters: int = 1  # requests join the batch every K iterations
    balance_ranks: int = 0  # TRT-LLM ADP balance: released early once this many ranks wait
    eager_prefill: bool = False  # prefill passes run without CUDA graphs (host floor)

    def prefill_floor_s(self, num_layers: int) -> float:
        return EAGER_PREFILL_S_PER_LAYER * num_layers if self.eager_prefill else 0.0


def _trt_piecewise(hw: str, precision: str, isl: int, tp: int, ep: int, conc: int, date: str):
    """TRT-LLM recipes capture prefill in piecewise CUDA graphs only since 2026-01-29 (InferenceX
    #594/#620): FP8 B200 at concurrency >= 64, FP4 B200 for 1k/1k on TP8 EP8; H200 never."""
    if hw != "b200" or date < "2026-01-29":
        return False
    if precision == "fp8":
        return conc >= 64
    return isl == 1024 and tp == 8 and ep == 8


def recipe_for(
    framework: str,
    hardware: str,
    precision: str,
    tp: int,
    dp_attention: bool,
    concurrency: int,
    *,
    ep: int = 1,
    isl_tokens: int = 0,
    measured_date: str = "",
) -> Recipe:
    """The settings of the InferenceX launch script for this engine / system / checkpoint."""
    fw, hw = framework, hardware
    if fw == "sglang" and hw in ("b200", "b300"):
        if dp_attention:
            interval = 1
        elif precision == "fp8" and tp == 4:
            interval = 10
        else:
            interval = 30 if concurrency >= 16 else 10
        frac = 0.85 if precision == "fp4" else (0.95 if tp == 4 else 0.82)
        return Recipe("fp8", "static", frac, interval, eager_prefill=True)
    if fw == "sglang" and hw == "h200":
        return Recipe("bf16", "static", 0.82, eager_prefill=True)
    if fw == "sglang" and hw.startswith("mi"):
        return Recipe("fp8", "static", 0.8, eager_prefill=True)
    if fw == "trt":
        frac = 0.75 if hw == "h200" else 0.8
        eager = not _trt_piecewise(hw, precision, isl_tokens, tp, ep, concurrency, measured_date)
        if dp_attention:
            return Recipe("fp8", "free", frac, 60, balance_ranks=tp, eager_prefill=eager)
        return Recipe("fp8", "free", frac, eager_prefill=eager)
    if fw == "atom":
        return Recipe("fp8")
    if fw == "vllm":
        kv = "fp8" if (hw == "b200" and precision == "fp4") else "bf16"
        return Recipe(kv, "utilization", 0.9)
    # Disaggregated and other engines: TRT-LLM-based pools run FP8 KV, the rest "auto".
    return Recipe("fp8" if "trt" in fw else "bf16")


def engine_kv_tokens(cfg, recipe: Recipe) -> float:
    """Context tokens the engine's KV pool holds under the recipe's memory rule."""
    from agentx.replay.footprint import footprint_per_gpu, kv_share_per_gpu

    fp = footprint_per_gpu(cfg, 0.0, double_buffer=False)
    memory = RUNTIME_MEMORY_BYTES.get(cfg.chip.name, cfg.chip.hbm_bytes)
    weights = fp.weights_bytes + fp.replicated_bytes
    other = fp.activation_bytes + fp.routing_bytes + fp.workspace_bytes
    f = recipe.memory_fraction
    if recipe.pool_rule == "static":
        pool = f * memory - weights
    elif recipe.pool_rule == "free":
        pool = f * (memory - weights - other)
    elif recipe.pool_rule == "utilization":
        pool = f * memory - weights - other
    else:
        pool = memory - weights - other
    return max(pool, 0.0) / (cfg.kv_bytes_per_token * kv_share_per_gpu(cfg))


# Tokens drafted per step (MTP modules, ``num_nextn_predict_layers`` / SGLang
# ``speculative-num-steps``) by the launch recipe of each measured MTP configuration. Single
# node: ``dsr1_fp8_b200_trt_mtp*.sh`` sets ``MTP=3`` (1 with attention DP) and
# ``dsr1_fp8_mi355x_mtp.sh`` ``--speculative-num-steps 3``. Disaggregated: the srt-slurm
# recipe each InferenceX master config entry names for that concurrency
# (``.github/configs/nvidia-master.yaml`` on the run's date; the files themselves as copied into
# ``benchmarks/multi_node/srt-slurm-recipes/`` at InferenceX 80d98084f, 2026-04-28).
# Key: (hardware, precision, engine, ISL, concurrency).
DISAGG_DRAFT_TOKENS = {
    # sglang/dsr1/b200-fp4/1k1k/disagg/mtp/1k1k_mtp_maxtpt_0.yaml: speculative-num-steps 2
    ("b200", "fp4", "dynamo-sglang", 1024, 1024): 2,
    # trtllm/b200-fp4/1k1k/mtp/ctx3_gen5_dep4_batch512_eplb0_mtp1.yaml
    ("b200", "fp4", "dynamo-trt", 1024, 10860): 1,
    # trtllm/b200-fp4/8k1k/mtp/ctx5_gen2_dep8_batch32_eplb0_mtp3.yaml
    ("b200", "fp4", "dynamo-trt", 8192, 658): 3,
    # trtllm/b200-fp8/1k1k/mtp/ctx1_gen2_dep8_batch768_eplb0_mtp2_1600.yaml
    ("b200", "fp8", "dynamo-trt", 1024, 1600): 2,
    # trtllm/b200-fp8/8k1k/mtp/ctx4_gen1_dep8_batch128_eplb0_mtp2_1088.yaml
    ("b200", "fp8", "dynamo-trt", 8192, 1088): 2,
    # trtllm/gb200-fp4/1k1k/mtp/ctx3_gen5_dep4_batch768_eplb0_mtp1.yaml
    ("gb200", "fp4", "dynamo-trt", 1024, 16130): 1,
}


def recipe_draft_tokens(
    framework: str, hardware: str, precision: str, isl_tokens: int, concurrency: int, dp_attention
) -> int | None:
    """Tokens the run's launch recipe drafts per step, or None where no recipe was read."""
    if framework == "trt" and hardware == "b200" and precision == "fp8":
        return 1 if dp_attention else 3
    if framework == "sglang" and hardware == "mi355x" and precision == "fp8":
        return 3
    return DISAGG_DRAFT_TOKENS.get((hardware, precision, framework, isl_tokens, concurrency))
