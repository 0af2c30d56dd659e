"""agentx with DEFAULT efficiencies against NVIDIA AIConfigurator 0.12 reference points.

DeepSeek-V3, FP8 weights and KV, TRT-LLM, TP8×EP8 on 8 GPUs (issue 3). The table in
docs/validation.md is checked against the numbers computed here; regenerate it with
``AGENTX_REGEN_DOCS=1 pytest tests/test_validation_aic.py``.

The configuration names its engine (``engine="trt"``): fills price the routed experts with
TRT-LLM's measured MoE layer (agentx.serving.kernels, AIConfigurator's own collected tables,
H200 CUTLASS and B200 DeepGEMM FP8 block-scale, EP8). That is legitimate only because
AIConfigurator's reference points are themselves built from TRT-LLM's measured kernels: the
same kernel measurement on both sides, not a factor fitted to these points. Decode is
unaffected (the weight read bounds it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _docblock import assert_block_current

from agentx.catalog import load_catalog
from agentx.replay import make_config
from agentx.replay.stages import decode_attention_step, decode_experts_step, fill_cost

DOC = Path(__file__).resolve().parent.parent / "docs" / "validation.md"
BEGIN, END = "<!-- aic-table:begin -->", "<!-- aic-table:end -->"
TOLERANCE = 0.35  # issue 3: every point, default efficiencies, nothing fitted to these points

# (point, system, AIC ms, function of cfg → agentx seconds)
POINTS = [
    ("decode step, batch 64, 8k context", "h200", 31.7, lambda c: _decode(c, 64, 8192)),
    ("  decode attention", "h200", 9.6, lambda c: decode_attention_step(c, 64, 64 * 8192).time_s),
    ("  decode experts", "h200", 21.6, lambda c: decode_experts_step(c, 64).time_s),
    ("decode step, batch 64, 8k context", "b200", 23.4, lambda c: _decode(c, 64, 8192)),
    ("  decode attention", "b200", 6.6, lambda c: decode_attention_step(c, 64, 64 * 8192).time_s),
    ("  decode experts", "b200", 16.4, lambda c: decode_experts_step(c, 64).time_s),
    ("decode step, batch 8, 128k context", "h200", 25.9, lambda c: _decode(c, 8, 131072)),
    ("  decode attention", "h200", 15.3, lambda c: decode_attention_step(c, 8, 8 * 131072).time_s),
    ("prefill 8k tokens", "h200", 316.0, lambda c: fill_cost(c, 8192, 0).time_s),
    ("prefill 8k tokens", "b200", 147.0, lambda c: fill_cost(c, 8192, 0).time_s),
    (
        "midfill 2,048 onto 129,024 cached",
        "h200",
        425.0,
        lambda c: fill_cost(c, 2048, 129024).time_s,
    ),
    (
        "midfill 2,048 onto 129,024 cached",
        "b200",
        170.0,
        lambda c: fill_cost(c, 2048, 129024).time_s,
    ),
]


def _decode(cfg, batch, ctx):
    return (
        decode_attention_step(cfg, batch, batch * ctx).time_s
        + decode_experts_step(cfg, batch).time_s
    )


def _cfg(hw: str, engine: str | None = "trt"):
    return make_config(
        load_catalog(),
        hw,
        "deepseek-v3",
        gpus=8,
        tp=8,
        ep=8,
        dp_attention=False,
        decode_batch=64,
        engine=engine,
    )


def compute_rows(engine: str | None = "trt") -> list[tuple[str, str, float, float, float]]:
    cfgs = {hw: _cfg(hw, engine) for hw in ("h200", "b200")}
    return [
        (p, hw, ref, 1e3 * float(f(cfgs[hw])), 1e3 * float(f(cfgs[hw])) / ref - 1)
        for p, hw, ref, f in POINTS
    ]


def markdown(rows) -> str:
    out = [
        "| point | system | AIConfigurator ms | agentx ms | agentx / AIC − 1 |",
        "|---|---|---:|---:|---:|",
    ]
    for p, hw, ref, got, err in rows:
        out.append(
            f"| {p.strip() if not p.startswith(' ') else '↳ ' + p.strip()} | {hw.upper()} | {ref:.1f} | {got:.1f} | {err:+.1%} |"
        )
    return "\n".join(out)


def test_aiconfigurator_points_within_tolerance():
    rows = compute_rows()
    print("\n" + markdown(rows))
    for p, hw, ref, got, err in rows:
        assert abs(err) <= TOLERANCE, (
            f"{p} on {hw}: agentx {got:.1f} ms vs AIC {ref} ms ({err:+.1%})"
        )


PREFILL_WITH_KERNEL = 0.20  # issue 9: measured −19.7 % (H200) / −19.8 % (B200)


def test_measured_moe_kernel_brings_prefill_closer():
    """The engine's MoE table moves both 8k prefill points toward AIConfigurator (−32.5 % /
    −29.8 % on the roofline alone, −19.7 % / −19.8 % with it: the issue's ±20 %, once replay
    also charges the TP-sharded dense-FFN all-reduce and the collectives' latency floor) and
    leaves decode as it was. (The midfill points move too: H200 −12 % → −7 %, B200 −1 % → +4 %.)"""
    with_kernel, roofline = compute_rows(), compute_rows(engine=None)
    for (p, hw, _, got, err), (_, _, _, plain, plain_err) in zip(
        with_kernel, roofline, strict=True
    ):
        if p.startswith("prefill"):
            assert abs(err) < abs(plain_err), f"{p} on {hw}: {err:+.1%} vs {plain_err:+.1%}"
            assert abs(err) <= PREFILL_WITH_KERNEL, f"{p} on {hw}: {err:+.1%}"
        elif not p.startswith("midfill"):
            assert got == plain, p


def test_validation_doc_table_is_current():
    assert_block_current(DOC, BEGIN, END, markdown(compute_rows()))


@pytest.mark.parametrize("hw", ["h200", "b200"])
def test_decode_is_memory_bound_and_prefill_compute_bound(hw):
    """The physics behind the points: decode reads far more bytes per FLOP than prefill."""
    cfg = _cfg(hw)
    ridge = cfg.chip.flops_per_s("fp8") / cfg.chip.hbm_bytes_per_s
    exp = decode_experts_step(cfg, 64)
    pre = fill_cost(cfg, 8192, 0)
    assert exp.flops / exp.hbm_bytes < 0.05 * ridge < ridge < pre.flops / pre.hbm_bytes
