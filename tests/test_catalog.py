"""Catalogs against the reference CSVs (../shared/reference), user catalogs, hw/models CLI."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from agentx.catalog import load_catalog
from agentx.catalog.types import ModelSpec
from agentx.cli import cli
from agentx.errors import CatalogError, UnknownNameError

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
SYSTEMS = {
    "h100",
    "h200",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "mi300x",
    "mi325x",
    "mi355x",
    "tpu-v6e",
    "tpu7x",
}
MODELS = {"deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "qwen3-coder-480b", "gpt-oss-120b",
          "llama4-maverick", "glm-4.6", "minimax-m2", "llama3.1-70b"}  # fmt: skip
CSV_CHIP = {
    "H100 SXM": "h100", "H200 SXM": "h200", "B200": "b200", "B300 (Blackwell Ultra)": "b300",
    "GB200 (per GPU)": "gb200", "GB300 (per GPU)": "gb300", "MI300X": "mi300x", "MI325X": "mi325x",
    "MI355X": "mi355x", "TPU v6e (Trillium)": "tpu-v6e", "TPU7x (Ironwood)": "tpu7x",
}  # fmt: skip
# Cells the CSV notes state in GiB although the column says GB.
GIB = {("tpu7x", "hbm_gb"), ("mi300x", "host_dram_gb_per_gpu"), ("tpu-v6e", "host_dram_gb_per_gpu")}
# NOTES.md "Sources of model configs": totals recomputed from the configs (billions).
NOTES_COMPUTED_TOTAL = {
    "deepseek-v3": 671.0, "kimi-k2": 1026.4, "qwen3-235b-a22b": 235.1, "qwen3-coder-480b": 480.2,
    "gpt-oss-120b": 116.83, "llama4-maverick": 400.7, "glm-4.6": 352.8, "minimax-m2": 228.7,
    "llama3.1-70b": 70.55,
}  # fmt: skip


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _csv(name: str) -> list[dict]:
    path = REFERENCE / name
    if not path.exists():
        pytest.skip(f"reference table {path} is absent")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _gb(slug: str, col: str, cell: str) -> float:
    return float(cell) * (2**30 if (slug, col) in GIB else 1e9)


def test_slugs_are_the_documented_ones(cat):
    assert set(cat.systems) == SYSTEMS and set(cat.chips) == SYSTEMS
    assert set(cat.models) == MODELS
    assert list(cat.models) == sorted(cat.models)
    assert all(s.chip is cat.chips[s.chip.name] for s in cat.systems.values())


def test_chips_and_systems_reproduce_every_accelerators_csv_row(cat):
    rows = _csv("accelerators.csv")
    assert {CSV_CHIP[r["name"]] for r in rows} == SYSTEMS
    for r in rows:
        slug = CSV_CHIP[r["name"]]
        chip, system = cat.chip(slug), cat.system(slug)
        assert chip.hbm_bytes == pytest.approx(_gb(slug, "hbm_gb", r["hbm_gb"])), slug
        assert chip.hbm_bytes_per_s == pytest.approx(float(r["hbm_tb_s"]) * 1e12), slug
        for prec in ("bf16", "fp8", "fp4"):
            cell, value = r[f"dense_{prec}_tflops"], getattr(chip, f"{prec}_flops_per_s")
            assert value == (pytest.approx(float(cell) * 1e12) if cell else None), (slug, prec)
        assert chip.tdp_w == (float(r["tdp_w"]) if r["tdp_w"] else None), slug
        assert (chip.idle_w is None) == (chip.tdp_w is None), slug
        if chip.idle_w is not None:
            assert 0 < chip.idle_w < chip.tdp_w
        assert system.scale_up_domain_gpus == int(r["scale_up_domain_gpus"]), slug
        assert system.scale_up_bytes_per_s == pytest.approx(float(r["scale_up_gb_s_per_gpu"]) * 1e9)
        if r["scale_out_gb_s_per_gpu"]:
            assert system.scale_out_bytes_per_s == pytest.approx(
                float(r["scale_out_gb_s_per_gpu"]) * 1e9
            )
        else:  # unpublished: the catalog must say its value is an estimate
            assert "[E]" in system.source, slug
        if r["host_dram_gb_per_gpu"]:
            col = "host_dram_gb_per_gpu"
            assert system.host_dram_bytes == pytest.approx(_gb(slug, col, r[col])), slug
        assert (
            "nvlink-c2c" if "NVLink-C2C" in r["host_link_gb_s"] else "pcie5"
        ) == system.host_link


def test_every_entry_cites_its_source(cat):
    for spec in [*cat.chips.values(), *cat.systems.values(), *cat.models.values()]:
        assert re.search(r"https://|NOTES\.md", spec.source), spec.name
    for system in cat.systems.values():
        assert "NOTES.md (b)" in system.source and "NOTES.md (c)" in system.source


def test_models_reproduce_models_csv(cat):
    rows = _csv("models.csv")
    by_repo = {m.hf_repo: m for m in cat.models.values()}
    assert len(rows) == len(MODELS)
    for r in rows:
        m = by_repo[r["hf_repo"].split(" ;")[0].strip()]
        assert m.kv_bytes_per_token("bf16") == float(r["kv_bytes_per_token_bf16"]), m.name
        assert m.total_params == pytest.approx(float(r["total_params_b"]) * 1e9), m.name
        assert m.active_params == pytest.approx(float(r["active_params_b"]) * 1e9), m.name
        for col, field in [("num_layers", "num_layers"), ("hidden_size", "hidden_size"),
                           ("num_attention_heads", "num_attention_heads"), ("vocab_size", "vocab_size"),
                           ("num_dense_layers", "num_dense_layers"), ("max_context", "max_context_tokens")]:  # fmt: skip
            assert getattr(m, field) == int(r[col]), (m.name, col)
        assert m.attention == ("mla" if r["attention_type"] == "MLA" else "gqa")


def test_computed_parameters_match_vendor_and_notes(cat):
    for m in cat.models.values():
        assert m.computed_total_params == pytest.approx(m.total_params, rel=0.03), m.name
        assert m.computed_total_params / 1e9 == pytest.approx(
            NOTES_COMPUTED_TOTAL[m.name], rel=0.03
        )
        assert m.computed_active_params == pytest.approx(m.active_params, rel=0.10), m.name


def test_deepseek_v3_kv_bytes_per_token_seed_14(cat):
    dsv3 = cat.model("deepseek-v3")
    assert dsv3.kv_bytes_per_token("bf16") == 70_272  # SEED-14's ~70 KB/token
    assert dsv3.kv_bytes_per_token("fp8") == 40_016  # FlashMLA FP8-with-scale, NOTES.md (a)
    assert cat.model("kimi-k2").kv_bytes_per_token("bf16") == 70_272


@pytest.mark.parametrize(
    ("name", "long_context"), [("gpt-oss-120b", 36_864), ("llama4-maverick", 49_152)]
)
def test_local_attention_asymptotic_kv(cat, name, long_context):
    m = cat.model(name)
    s = 1_000_000
    assert float(m.kv_bytes(s) - m.kv_bytes(s - 1)) == long_context
    w = m.local_window_tokens
    assert float(m.kv_bytes(w)) == w * m.kv_bytes_per_token("bf16")


@given(
    layers=st.integers(2, 96), local=st.integers(0, 96), window=st.integers(1, 10_000),
    kv_heads=st.integers(1, 16), s=st.floats(0, 2e6), ds=st.floats(0, 1e5),
)  # fmt: skip
def test_kv_bytes_monotone_and_bounded(cat, layers, local, window, kv_heads, s, ds):
    base = cat.model("llama3.1-70b")
    local = min(local, layers)
    m = ModelSpec(**{**base.__dict__, "num_layers": layers, "num_dense_layers": layers,
                     "num_local_layers": local, "local_window_tokens": window if local else 0,
                     "num_kv_heads": kv_heads})  # fmt: skip
    a, b = float(m.kv_bytes(s)), float(m.kv_bytes(s + ds))
    assert 0 <= a <= b <= (s + ds) * m.kv_bytes_per_token() * (1 + 1e-12)


def test_unknown_names_suggest(cat):
    with pytest.raises(
        UnknownNameError, match=r"^unknown hardware 'gb20'; did you mean 'gb200'\?$"
    ):
        cat.system("gb20")
    with pytest.raises(
        UnknownNameError, match=r"^unknown model 'deepseek-v2'; did you mean 'deepseek-v3'\?$"
    ):
        cat.model("deepseek-v2")
    assert cat.system("GB200") is cat.systems["gb200"]


def test_version_is_a_content_hash(cat, tmp_path):
    assert re.fullmatch(r"[0-9a-f]{12}", cat.version) and load_catalog().version == cat.version
    user = tmp_path / "my.toml"
    user.write_text('[chips.h100]\nbase = "h100"\nhbm_bytes = 96e9\n')
    assert load_catalog([user]).version != cat.version


USER_TOML = """
[chips.b200x]
base = "b200"
display_name = "B200 at 1.2 kW"
tdp_w = 1200

[systems.mybox]
base = "b200"
chip = "b200x"
gpus_per_node = 4

[models.tiny]
display_name = "Tiny"
hf_repo = "me/tiny"
total_params = 1e9
active_params = 1e9
num_layers = 4
num_dense_layers = 4
hidden_size = 1024
vocab_size = 32000
attention = "gqa"
num_attention_heads = 8
num_kv_heads = 2
qk_head_dim = 128
v_head_dim = 128
dense_intermediate_size = 4096
max_context_tokens = 8192
tied_embeddings = true
source = "made up for a test"
"""


def test_user_catalog_adds_and_overrides(tmp_path):
    user = tmp_path / "my.toml"
    user.write_text(USER_TOML)
    cat = load_catalog([user])
    box = cat.system("mybox")
    assert box.chip.name == "b200x" and box.chip.tdp_w == 1200 and box.chip.hbm_bytes == 180e9
    assert box.gpus_per_node == 4 and box.scale_up_bytes_per_s == 900e9
    assert cat.model("tiny").kv_bytes_per_token("bf16") == 4 * 2 * 2 * 128 * 2
    assert cat.model("tiny").kv_lora_rank == 0 and cat.files[-1] == str(user)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[systems.mybox]\nbase = "b200"\nchip = "b2000"\n',
         "[systems.mybox]: key 'chip': unknown chip 'b2000'; did you mean 'b200'?"),
        ('[chips.x]\nbase = "h100"\nhbm_byte = 1\n',
         "[chips.x]: unknown key 'hbm_byte'; did you mean 'hbm_bytes'?"),
        ('[chips.x]\nbase = "h100"\nhbm_bytes = "80 GB"\n', "[chips.x]: key 'hbm_bytes': expected a number, got '80 GB'"),
        ('[chips.x]\nbase = "h100"\nhbm_bytes = 0\n', "[chips.x]: key 'hbm_bytes': expected a number > 0, got 0.0"),
        ('[chips.x]\ndisplay_name = "X"\n', "[chips.x]: missing key 'vendor'"),
        ('[models.x]\nbase = "kimi-k2"\nattention = "mha"\n', "[models.x]: key 'attention': expected one of gqa, mla, got 'mha'"),
        ('[models.x]\nbase = "kimi-k2"\nexperts_per_token = 500\n',
         "[models.x]: key 'experts_per_token': expected at most n_routed_experts, got 500"),
        ('[models.glm-5.1]\nbase = "glm-4.6"\n',
         "[models.glm-5]: key '1' is a table; a name with a dot must be quoted, e.g. [models.\"glm-5.1\"]"),
        ('[system.x]\nchip = "h100"\n', "unknown table [system]; did you mean 'systems'?"),
        ("[chips.x\n", "not valid TOML: "),
    ],
)  # fmt: skip
def test_user_catalog_errors_name_file_table_key(tmp_path, text, message):
    user = tmp_path / "my.toml"
    user.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_catalog([user])
    assert str(err.value).startswith(f"{user}: {message}")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_cli_hw_and_models_list_show(tmp_path):
    res = run("hw", "list")
    assert res.exit_code == 0 and all(s in res.output for s in SYSTEMS)
    data = json.loads(run("hw", "show", "gb200", "--json").output)
    assert data["chip"]["hbm_bytes"] == 186e9 and data["scale_up_domain_gpus"] == 72
    data = json.loads(run("models", "show", "deepseek-v3", "--json").output)
    kv = {r["precision"]: r["kv_bytes_per_token"] for r in data["kv"]}
    assert kv["bf16"] == 70272 and kv["fp8"] == 40016
    assert {r["group"] for r in data["params"]} >= {"attention", "routed_expert", "computed_active"}
    text = run("models", "show", "gpt-oss-120b").output
    assert "36,864" in text and "parameters per group" in text
    user = tmp_path / "my.toml"
    user.write_text(USER_TOML)
    listed = json.loads(run("models", "list", "--json", "--catalog", str(user)).output)
    assert "tiny" in [m["spec"]["name"] for m in listed]


def test_cli_errors():
    res = run("hw", "show", "gb20")
    assert (
        res.exit_code == 2
        and res.output == "Error: unknown hardware 'gb20'; did you mean 'gb200'?\n"
    )
    res = run("models", "show", "kimi-k3")
    assert res.exit_code == 2 and "did you mean 'kimi-k2'?" in res.output
    res = run("hw", "list", "--catalog", "no-such.toml")
    assert res.exit_code == 1 and res.output == "Error: no-such.toml: no such catalog file\n"


@pytest.mark.parametrize(
    "args",
    [["hw"], ["hw", "list"], ["hw", "show"], ["models"], ["models", "list"], ["models", "show"]],
)
def test_help_ends_with_an_example(args):
    res = run(*args, "--help")
    assert res.exit_code == 0 and res.output.rstrip().splitlines()[-1].strip().startswith(
        "Example: agentx "
    )


def test_docs_example_catalog_loads(tmp_path):
    doc = (Path(__file__).resolve().parents[1] / "docs" / "catalog.md").read_text()
    block = re.search(r"```toml\n(.*?)```", doc, re.S).group(1)
    user = tmp_path / "my.toml"
    user.write_text(block)
    cat = load_catalog([user])
    assert cat.system("mybox").chip.tdp_w == 1200 and cat.system("mybox").host_dram_bytes == 1e12
    assert cat.model("tiny-moe").kv_bytes_per_token("bf16") == 24 * 2 * 4 * 128 * 2
