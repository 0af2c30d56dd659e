"""SEED-14 capacity arithmetic from the footprint code, and the ``agentx plan`` command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.errors import UsageError
from agentx.replay.footprint import weight_bytes_per_gpu
from agentx.replay.plan import plan_stage, stage_config

CAT = load_catalog()


def test_seed_14_kv_and_double_buffer():
    p = plan_stage(2e6, kv_bytes_per_token=70_000)
    assert p.kv_bytes == pytest.approx(140e9)  # "about 140 GB of KV per pipeline stage"
    assert p.kv_bytes + p.prefetch_buffer_bytes == pytest.approx(280e9)  # "about 280 GB"
    assert p.weights_bytes == 0 and p.total_bytes == pytest.approx(280e9 * 1.05)


def test_seed_14_kv_from_the_deepseek_catalog_entry():
    # 70 KB/token is DeepSeek-V3's BF16 latent (SEED-14): one stage, data-parallel attention
    c = stage_config(CAT.model("deepseek-v3"), kv_precision="bf16", dp_attention=True)
    p = plan_stage(2e6, cfg=c)
    assert p.kv_bytes_per_token == 70_272
    assert p.kv_bytes == pytest.approx(140.5e9, rel=1e-3)
    assert p.prefetch_buffer_bytes == p.kv_bytes


@pytest.mark.parametrize("model", ["kimi-k2", "deepseek-v3"])
def test_seed_14_400_to_500_gb_per_stage(model):
    """SEED-14: KV 280 GB double-buffered + weights, activations, routing, headroom ≈ 400-500 GB,
    for a DeepSeek/Kimi-class model in FP8 over 8 pipeline stages of 8 GPUs."""
    c = stage_config(CAT.model(model), pp=8, dp_attention=True)
    p = plan_stage(2e6, kv_bytes_per_token=70_000, cfg=c)
    assert 400e9 <= p.total_bytes <= 500e9, p.total_bytes
    shard, replicated = weight_bytes_per_gpu(c)
    assert p.weights_bytes == pytest.approx(8 * (shard + replicated))
    # the weights are an eighth of the model, give or take the fuller stage and replicas
    total = CAT.model(model).computed_total_params
    assert total / 8 < p.weights_bytes < total / 8 * 1.25
    parts = (p.kv_bytes + p.prefetch_buffer_bytes + p.weights_bytes + p.activation_bytes
             + p.routing_bytes + p.workspace_bytes + p.headroom_bytes)  # fmt: skip
    assert p.total_bytes == pytest.approx(parts)
    assert p.routing_bytes > 0 and p.activation_bytes > 0


def test_tensor_parallel_attention_replicates_the_mla_latent():
    dp = plan_stage(
        2e6, kv_bytes_per_token=70_000, cfg=stage_config(CAT.model("kimi-k2"), dp_attention=True)
    )
    tp = plan_stage(2e6, kv_bytes_per_token=70_000, cfg=stage_config(CAT.model("kimi-k2")))
    assert tp.kv_bytes == pytest.approx(8 * dp.kv_bytes)


def test_plan_rejects_nonsense():
    with pytest.raises(UsageError, match="give --kv-bytes-per-token or --model"):
        plan_stage(2e6)
    with pytest.raises(UsageError, match="must be >= 0"):
        plan_stage(-1, kv_bytes_per_token=70_000)


def run(*args: str):
    return CliRunner().invoke(cli, ["plan", *args])


def test_cli_seed_14_numbers():
    res = run("--kv-bytes-per-token", "70000", "--context-tokens", "2e6", "--json")
    assert res.exit_code == 0, res.output
    stage = json.loads(res.output)["bytes_per_stage"]
    assert stage["kv"] == pytest.approx(140e9) and stage["prefetch_buffer"] == pytest.approx(140e9)
    res = run("--kv-bytes-per-token", "70000", "--context-tokens", "2e6", "--model", "kimi-k2",
              "--pp", "8", "--weight-precision", "fp8", "--json")  # fmt: skip
    data = json.loads(res.output)
    assert 400e9 <= data["bytes_per_stage"]["total"] <= 500e9
    assert data["config"] == "64 × GPUs (tp 8, ep 8, pp 8, dp-attention, fp8)"
    text = run("--kv-bytes-per-token", "70000", "--context-tokens", "2e6").output
    assert "prefetch_buffer" in text and "70,000 B/token × 2,000,000 tokens" in text


def test_cli_footprint_on_hardware():
    res = run("--model", "deepseek-v3", "--hw", "h200", "--gpus", "8", "--tp-attention")
    assert res.exit_code == 0, res.output
    assert "weights_shard" in res.output and "on 8 × h200 (tp 8, ep 8, fp8): fits" in res.output
    res = run("--model", "deepseek-v3", "--hw", "h200", "--gpus", "4", "--json")
    data = json.loads(res.output)
    assert data["fits"] is False and data["max_resident_tokens"] == 0
    assert data["footprint_bytes_per_gpu"]["free"] < -30e9


def test_cli_errors():
    res = run("--hw", "h200")
    assert (
        res.exit_code == 2
        and res.output == "Error: --hw needs --model (whose weights and KV to place)\n"
    )
    res = run("--model", "kimi-k3", "--kv-bytes-per-token", "1")
    assert (
        res.exit_code == 2
        and res.output == "Error: unknown model 'kimi-k3'; did you mean 'kimi-k2'?\n"
    )
    res = run("--model", "deepseek-v3", "--hw", "h200", "--gpus", "8", "--tp", "3")
    assert res.exit_code == 2 and "tp 3" in res.output
    res = run("--help")
    assert res.output.rstrip().splitlines()[-1].strip().startswith("Example: agentx plan")
