"""One number format and one unit system across every command's text output (issue 13).

Every number a command prints as text must be what ``agentx.fmt.num`` writes for its value
(thousands separators, 4 significant digits, scientific only outside 1e-3…1e9), so the same
quantity reads the same everywhere; tables show GB, never raw byte counts; ``--json`` carries
plain JSON numbers with the unit in the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentx.cli import cli
from agentx.fmt import num

NUMBER = re.compile(r"(?<![\w.\-])-?\d(?:\d|,(?=\d))*(?:\.\d+)?(?:e[+-]\d+)?(?![\w.%])")


def noncanonical(text: str) -> list[str]:
    """Number tokens in ``text`` that the one formatter would not have written."""
    bad = []
    for m in NUMBER.finditer(text):
        tok = m.group(0)
        plain = tok.replace(",", "")
        value: float | int = float(plain) if any(c in plain for c in ".e") else int(plain)
        if num(value) != tok and num(float(value)) != tok:
            bad.append(tok)
    return bad


def test_the_check_can_fail():
    assert noncanonical("calls 77447  input_tokens_p50 99457.0  time_share 0.004731") == [
        "77447",
        "99457.0",
    ]
    assert noncanonical("hbm_gb 2.6e+08") == ["2.6e+08"]
    assert noncanonical("calls 77,447, 1.229e+14 B, 0.004731, fp8, 16 × gb200 (tp 4)") == []


POINTS = (
    "hardware,model,precision,framework,parallelism,isl_tokens,osl_tokens,concurrency,"
    "output_tok_s_per_gpu,output_tok_s_per_user,ttft_ms,tpot_ms,spec_decoding,disagg\n"
    "h200,deepseek-ai/DeepSeek-R1-0528,fp8,sglang,tp8 ep1,8192,1024,4,43.12,91.09,311.5,10.98,none,false\n"
    "h200,deepseek-ai/DeepSeek-R1-0528,fp8,sglang,tp8 ep1,1024,1024,16,143.12,71.09,211.5,13.98,none,false\n"
)
TRACELAB = Path(__file__).resolve().parents[2] / "shared" / "traces" / "tracelab-example"


def _commands(trace, tmp):
    t = str(trace)
    points = tmp / "points.csv"
    points.write_text(POINTS)
    more = {}
    if (TRACELAB / "round_trace.jsonl").exists():  # the real shared trace (skipped without it)
        more["import"] = ["import", "tracelab", str(TRACELAB / "round_trace.jsonl"),
                          "-o", str(tmp / "tl.parquet"), "-q"]  # fmt: skip
    return more | {
        "synth": ["synth", "-o", str(tmp / "s.parquet"), "--sessions", "3"],
        "validate": ["validate", str(points)],
        "calibrate": ["calibrate", str(points), "--no-cv", "-o", str(tmp / "overlay.toml")],
        "report": ["report", t, "-o", str(tmp / "r.html"), "-q"],
        "inspect": ["inspect", t],
        "hw list": ["hw", "list"],
        "hw show": ["hw", "show", "gb200"],
        "models list": ["models", "list"],
        "models show": ["models", "show", "kimi-k2"],
        "plan": ["plan", "--hw", "b300", "--model", "kimi-k2"],
        "replay": ["replay", t, "--hw", "b300", "-q", "--over-context", "compact"],
        "kv-curve": ["kv-curve", t, "--hw", "gb200", "-q"],
        "sweep": ["sweep", "--hw", "b300", "--gpus", "8", "-o", str(tmp / "sweep"), "-q"],
        "simulate": ["simulate", t, "--hw", "b300", "-o", str(tmp / "sim"), "-q"],
        "compare": ["compare", t, "--hw", "gb200,b300", "--load-scale", "1000", "-q"],
        "sql": ["sql", "SELECT count(*) AS calls, sum(input_tokens) AS input_tokens FROM calls", t],
        "replay fleet": ["replay", t, "--hw", "gb200", "--replicas", "2", "-q"],
        "partition": ["partition", t, "--hw", "gb200", "--replicas", "2", "-o", str(tmp / "ds")],
        "export": ["export", t, "--format", "mooncake", "-o", str(tmp / "m.jsonl")],
    }


@pytest.fixture(scope="module")
def outputs(sample_trace, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fmt")
    out = {}
    for name, args in _commands(sample_trace, tmp).items():
        text = CliRunner().invoke(cli, args)
        assert text.exit_code == 0, (name, text.output)
        json_args = ["--json"]  # sql too (its --format json is the same)
        if name in ("sweep", "simulate", "partition"):
            args = [a.replace(str(tmp), str(tmp / "j")) for a in args]
        js = CliRunner().invoke(cli, [*args, *json_args])
        assert js.exit_code == 0, (name, js.output)
        out[name] = (text.stdout, js.stdout)
    return out


def test_every_text_number_is_formatted_once(outputs):
    bad = {name: noncanonical(text) for name, (text, _) in outputs.items()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_tables_show_gb_never_byte_counts(outputs):
    for name, (text, _) in outputs.items():
        heads = [w for line in text.splitlines() for w in line.split()]
        # capacities and traffic in GB (bytes per token, a per-token size, stays in bytes)
        assert not [w for w in heads if w.endswith(("_bytes", "_bytes_per_gpu"))], name


def test_json_is_plain_numbers_with_units_in_keys(outputs):
    # (strict JSON, no NaN, is tests/test_fuzz*'s job: issue 15)
    def walk(o, key=""):
        if isinstance(o, dict):
            for k, v in o.items():
                yield from walk(v, k)
        elif isinstance(o, list):
            for v in o:
                yield from walk(v, key)
        else:
            yield key, o

    for name, (_, js) in outputs.items():
        for key, v in walk(json.loads(js)):
            # a number given as text would escape the unit-in-key convention
            if isinstance(v, str) and not key.endswith(("version", "_id", "name")):
                assert not re.fullmatch(r"-?[\d,]+(\.\d+)?(e[+-]\d+)?", v), (name, key, v)


def test_sql_json_is_format_json(sample_trace):
    q = ["sql", "SELECT count(*) AS calls FROM calls", str(sample_trace)]
    a = CliRunner().invoke(cli, [*q, "--json"])
    b = CliRunner().invoke(cli, [*q, "--format", "json"])
    assert a.exit_code == b.exit_code == 0 and a.stdout == b.stdout
    assert json.loads(a.stdout) == [{"calls": 445}]
    c = CliRunner().invoke(cli, [*q, "--json", "--format", "csv"])
    assert c.exit_code == 2 and "Error: give --json or --format csv, not both" in c.output


@pytest.mark.parametrize("hw", ["gb200", "b300"])
def test_gpu_counts_default_alike_plan_kv_curve(sample_trace, hw):
    """plan --hw and kv-curve take the one default of replay (agentx.replay.config.default_gpus)."""
    from agentx.catalog import load_catalog
    from agentx.replay.config import default_gpus

    want = default_gpus(load_catalog().system(hw))
    assert want == {"gb200": 32, "b300": 8}[hw]
    p = CliRunner().invoke(cli, ["plan", "--hw", hw, "--model", "kimi-k2", "--json"])
    assert json.loads(p.stdout)["config"].startswith(f"{want} × {hw}")
    k = CliRunner().invoke(cli, ["kv-curve", str(sample_trace), "--hw", hw, "--json", "-q"])
    assert json.loads(k.stdout)["gpus"] == want


def test_gpu_counts_default_alike(sample_trace, tmp_path):
    """replay and simulate run the same deployment when --gpus is not given."""
    r = CliRunner().invoke(cli, ["replay", str(sample_trace), "--hw", "gb200", "--no-kv-tiers",
                                 "--json", "-q"])  # fmt: skip
    s = CliRunner().invoke(cli, ["simulate", str(sample_trace), "--hw", "gb200", "--json", "-q",
                                 "-o", str(tmp_path / "sim")])  # fmt: skip
    assert json.loads(r.stdout)["gpus"] == 32
    assert json.loads((tmp_path / "sim" / "run.json").read_text())["config"]["gpus"] == 32
    assert s.exit_code == 0
