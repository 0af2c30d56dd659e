"""agentx validate / calibrate against the real InferenceX measurements (SOURCES.md).

Figures are printed (run with -s) and checked against the issue's acceptance targets. A target
the model does not meet yet is an xfail(strict=True) whose reason states the measured figure:
the test turns red the day the target is met, so the mark cannot outlive the shortfall.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _docblock import assert_block_current
from click.testing import CliRunner

from agentx.catalog import load_catalog
from agentx.cli import cli
from agentx.serving.calibrate import (
    DEFAULT_FIT,
    PARAMS,
    calibrate,
    check_fit,
    fit_points,
    fit_system,
    leave_one_group_out,
    theta_of,
)
from agentx.serving.points import METRICS, read_points
from agentx.serving.steady import Speculation
from agentx.serving.validate import model_point, row_speculation, summary, validate_points

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT.parent / "shared" / "reference" / "measured" / "inferencex-points.csv"
CAT = load_catalog()
HEADER = (
    "hardware,model,precision,framework,parallelism,isl_tokens,osl_tokens,concurrency,"
    "output_tok_s_per_gpu,output_tok_s_per_user,ttft_ms,tpot_ms,spec_decoding,disagg"
)
GOOD = "h200,deepseek-ai/DeepSeek-R1-0528,fp8,sglang,tp8 ep1,8192,1024,4,43.12,91.09,311.5,10.98,none,false"


@pytest.fixture(scope="module")
def measured():
    if not MEASURED.exists():
        pytest.skip(
            f"measured points not found: {MEASURED} (../shared/reference is not checked out)"
        )
    return read_points(MEASURED, CAT)


@pytest.fixture(scope="module")
def all_records(measured):
    """Every compared (row, metric) with default efficiencies."""
    return validate_points(CAT, measured[0])[0]


@pytest.fixture(scope="module")
def default_records(all_records):
    return [r for r in all_records if r["acceptance"]]


def _fmt(s):
    return f"median {s['median']:.1%} p90 {s['p90']:.1%} worst {s['worst']:.1%} (n={s['n']})"


# (metric, statistic, target, measured shortfall or None when met). Figures: docs/validation.md.
DEFAULT_TARGETS = [
    ("tpot_ms", "median", 0.20, None),
    ("tpot_ms", "p90", 0.40, None),
    ("output_tok_s_per_gpu", "median", 0.20, None),
    ("output_tok_s_per_gpu", "p90", 0.40, None),
    ("ttft_ms", "median", 0.35, None),
]


@pytest.mark.parametrize(
    "metric,stat,target",
    [
        pytest.param(m, s, t, marks=pytest.mark.xfail(strict=True, reason=why) if why else ())
        for m, s, t, why in DEFAULT_TARGETS
    ],
)
def test_default_efficiencies_on_single_node_rows(default_records, metric, stat, target):
    s = summary(default_records, metric)
    print(f"\ndefault efficiencies, acceptance set, {metric}: {_fmt(s)}")
    assert s["n"] >= 40
    assert s[stat] <= target


@pytest.fixture(scope="module")
def cross_validated(measured):
    pts = measured[0]
    lo = leave_one_group_out(CAT, pts)
    rows = {p.row for p in fit_points(pts) if p.single_node}
    return pts, lo, rows


# Round 4 (measured kernel times) left the medians above the default-efficiency medians: the
# five-parameter fit on a system's other engines transferred worse than the defaults (TPOT
# median 13.1 %, output/GPU 12.8 %, output p90 25.4 % at round 7). Round 8 fits two parameters
# by default, achieved HBM bandwidth and request overhead (serving/calibrate.py says why;
# docs/validation.md "After agentx calibrate" lists every parameter set tried).
CV_TARGETS = [
    ("tpot_ms", "median", 0.12, None),
    ("tpot_ms", "p90", 0.25, None),
    ("output_tok_s_per_gpu", "median", 0.12, None),
    ("output_tok_s_per_gpu", "p90", 0.25, None),
]


@pytest.mark.parametrize(
    "metric,stat,target",
    [
        pytest.param(m, s, t, marks=pytest.mark.xfail(strict=True, reason=why) if why else ())
        for m, s, t, why in CV_TARGETS
    ],
)
def test_calibrated_leave_one_group_out(cross_validated, metric, stat, target):
    pts, lo, rows = cross_validated
    recs = [
        {"ratio": lo[p.row][metric] / p.measured[metric], "metric": metric}
        for p in pts
        if p.row in rows and metric in p.measured
    ]
    s = summary(recs, metric)
    print(f"\nleave-one-group-out, single-node rows, {metric}: {_fmt(s)}")
    assert s["n"] >= 40
    assert s[stat] <= target


def _mean_abs_log(records, metric) -> float:
    return float(np.mean([abs(np.log(r["ratio"])) for r in records if r["metric"] == metric]))


def test_calibration_lowers_in_sample_error(measured, default_records):
    """The fit lowers the in-sample error of every metric on the acceptance rows: the mean
    |log(modelled / measured)| (what a robust fit on log errors lowers) and the p90. It trades
    the middle for the tail on TPOT: its median goes 10.2 -> 11.1 % (docs/validation.md,
    "After agentx calibrate"), so the median is printed, not asserted."""
    params, fitted = calibrate(CAT, measured[0])
    recs, _ = validate_points(fitted, measured[0])
    after = [r for r in recs if r["acceptance"]]
    for m in ("tpot_ms", "ttft_ms", "output_tok_s_per_gpu"):
        b, a = summary(default_records, m), summary(after, m)
        lb, la = _mean_abs_log(default_records, m), _mean_abs_log(after, m)
        print(f"\n{m}: default {_fmt(b)}, mean |log| {lb:.3f}")
        print(f"{m}: calibrated in-sample {_fmt(a)}, mean |log| {la:.3f}")
        assert la < lb
        assert a["p90"] < b["p90"]
    for hw, vals in params.items():
        assert all(v > 0 for k, v in vals.items() if k.endswith("scale")), hw


def _acceptance_fit(p, draft_tokens: int, grid):
    tp = np.array([model_point(CAT, p, Speculation(draft_tokens, a))["tpot_ms"] for a in grid])
    return tp / p.measured["tpot_ms"]


def test_mtp_rows_reproducible_and_acceptance_reported(measured, all_records, default_records):
    """The per-token acceptance that reproduces each MTP row's TPOT, with 1 draft token and
    with the draft length of the row's launch recipe (Speculation draft_tokens 0)."""
    grid = np.linspace(0.0, 0.99, 100)
    one, recipe, spans = {}, {}, {}
    # A row pins its rate only as exactly as the model predicts TPOT on rows of its kind: the
    # p90 |error| of the non-MTP, non-saturated single-node (acceptance set) or disaggregated rows
    kind = {p.row: p for p in measured[0]}
    disagg = [
        r
        for r in all_records
        if kind[r["row"]].disagg and not (kind[r["row"]].spec or kind[r["row"]].saturated)
    ]
    p90_tpot = {
        False: summary(default_records, "tpot_ms")["p90"],
        True: summary(disagg, "tpot_ms")["p90"],
    }
    for p in measured[0]:
        if not p.spec:
            continue
        r1 = _acceptance_fit(p, 1, grid)
        one[p.row] = float(grid[np.abs(np.log(r1)).argmin()])
        d = row_speculation(p, Speculation(0, 0.5)).draft_tokens
        rd = _acceptance_fit(p, d, grid)
        err = np.abs(np.log(rd))
        recipe[p.row] = (d, float(grid[err.argmin()]), float(err.min()))
        ok = grid[np.abs(rd - 1) <= p90_tpot[p.disagg]]
        spans[p.row] = (float(ok.min()), float(ok.max()))
    print(
        "\nMTP rows, 1 draft: acceptance reproducing TPOT", {r: round(a, 2) for r, a in one.items()}
    )
    print("with the recipes' drafts: (drafts, acceptance)", {r: v[:2] for r, v in recipe.items()})
    assert len(recipe) == 8 and all(e < 0.05 for _, _, e in recipe.values())
    # Every MTP row's recipe was read: 3, 3 on one node; 1-3 disaggregated (serving/recipes.py)
    assert {r: d for r, (d, _, _) in recipe.items()} == {
        44: 3,
        45: 3,
        46: 2,
        47: 1,
        48: 3,
        52: 2,
        53: 2,
        58: 1,
    }
    lo, hi = max(a for a, _ in spans.values()), min(b for _, b in spans.values())
    print(f"TPOT p90 bands {p90_tpot}; one rate fits every row within them: [{lo:.2f}, {hi:.2f}]")
    # Plausible across rows: one per-token rate reproduces all eight within the model's p90
    assert lo <= hi
    accept = [a for _, a, _ in recipe.values()]
    assert max(accept) - min(accept) < max(one.values()) - min(one.values())


def test_cli_json_lists_every_compared_metric(measured):
    res = CliRunner().invoke(cli, ["validate", str(MEASURED), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) == {"points", "skipped"}
    first = doc["points"][0]
    assert set(first) == {"row", "metric", "measured", "modelled", "ratio"}
    assert first["row"] == 0 and first["metric"] == "tpot_ms" and first["measured"] == 5.87
    assert {p["metric"] for p in doc["points"]} == set(METRICS)
    assert all(abs(p["ratio"] - p["modelled"] / p["measured"]) < 1e-12 for p in doc["points"])
    skipped = {s["row"]: s["reason"] for s in doc["skipped"]}
    assert skipped[82] == "parallelism not stated (TP / GPU count unknown)"
    assert "MTP" in skipped[44]


def test_cli_table_has_summary_line(measured):
    res = CliRunner().invoke(cli, ["validate", str(MEASURED)])
    assert res.exit_code == 0
    assert "acceptance set: |error| TPOT median" in res.output


def _run(tmp_path, text, *args):
    f = tmp_path / "points.csv"
    f.write_text(text)
    return f, CliRunner().invoke(cli, ["validate", str(f), *args])


def test_good_minimal_csv_validates(tmp_path):
    _, res = _run(tmp_path, f"{HEADER}\n{GOOD}\n")
    assert res.exit_code == 0, res.output
    assert "TPOT" in res.output


@pytest.mark.parametrize(
    "header,row,message",
    [
        (
            HEADER.replace(",tpot_ms", ""),
            GOOD.replace(",10.98", ""),
            "field 'tpot_ms': missing column(s) tpot_ms; see docs/validation.md",
        ),
        (HEADER, GOOD.replace("h200", "h20"), "row 0: field 'hardware': unknown hardware 'h20'"),
        (
            HEADER,
            GOOD.replace("deepseek-ai/DeepSeek-R1-0528", "nobody/Model-X"),
            "row 0: field 'model': unknown model 'nobody/Model-X'",
        ),
        (
            HEADER,
            GOOD.replace(",4,43.12", ",0,43.12"),
            "row 0: field 'concurrency': expected a number > 0, got '0'",
        ),
        (
            HEADER,
            GOOD.replace("311.5", "-3"),
            "row 0: field 'ttft_ms': expected a number > 0, got '-3'",
        ),
        (
            HEADER,
            GOOD.replace("8192", "8k"),
            "row 0: field 'isl_tokens': expected a number, got '8k'",
        ),
        (
            HEADER,
            GOOD.replace("tp8 ep1", "eight gpus"),
            "row 0: field 'parallelism': expected 'tpN epM [dp-attn]', got 'eight gpus'",
        ),
        (
            HEADER,
            GOOD.replace(",fp8,", ",fp6,"),
            "row 0: field 'precision': expected one of fp8, fp4, int4, bf16, got 'fp6'",
        ),
    ],
)
def test_bad_input_is_one_line_naming_file_row_field(tmp_path, header, row, message):
    f, res = _run(tmp_path, f"{header}\n{row}\n")
    assert res.exit_code == 1
    assert res.output == f"Error: {f}: {message}\n" or res.output.startswith(
        f"Error: {f}: {message}"
    )
    assert res.output.count("\n") == 1 and "Traceback" not in res.output


def test_calibrate_writes_an_overlay_validate_can_use(tmp_path, measured):
    out = tmp_path / "h200.toml"
    res = CliRunner().invoke(
        cli, ["calibrate", str(MEASURED), "--hw", "h200", "--no-cv", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "after: |error| median" in res.output and out.exists()
    cat = load_catalog([out])
    assert cat.system("h200").calibrated_request_overhead_s > 0
    h200 = [p for p in measured[0] if p.hardware == "h200" and not p.spec and not p.saturated]
    before, _ = validate_points(CAT, h200)
    after, _ = validate_points(cat, h200)
    assert summary(after)["median"] < summary(before)["median"]


def test_calibrate_fits_only_the_named_parameters(measured):
    h200 = [p for p in fit_points(measured[0]) if p.hardware == "h200"]
    theta0 = theta_of(CAT, "h200")
    theta = fit_system(CAT, "h200", h200, ("calibrated_floor_scale",))
    moved = np.flatnonzero(theta != theta0)
    assert list(moved) == [PARAMS.index("calibrated_floor_scale")]
    assert DEFAULT_FIT == ("calibrated_hbm_scale", "calibrated_request_overhead_s")
    assert check_fit(["request_overhead_s", "hbm_scale", "hbm_scale"]) == DEFAULT_FIT


def test_calibrate_fit_option_names_an_unknown_parameter(tmp_path):
    if not MEASURED.exists():
        pytest.skip(f"measured points not found: {MEASURED}")
    out = tmp_path / "x.toml"
    res = CliRunner().invoke(
        cli, ["calibrate", str(MEASURED), "--fit", "hbm_scale,flor_scale", "-o", str(out)]
    )
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "Error: --fit: unknown parameter 'flor_scale'; did you mean 'floor_scale'?"
    )
    assert not out.exists()


def test_calibrate_refuses_a_system_without_points(tmp_path):
    if not MEASURED.exists():
        pytest.skip(f"measured points not found: {MEASURED}")
    res = CliRunner().invoke(
        cli, ["calibrate", str(MEASURED), "--hw", "tpu7x", "-o", str(tmp_path / "x.toml")]
    )
    assert res.exit_code != 0
    assert "no usable measured point for --hw tpu7x" in res.output
    assert not (tmp_path / "x.toml").exists()


DOC = ROOT / "docs" / "validation.md"
BEGIN, END = "<!-- inferencex-table:begin -->", "<!-- inferencex-table:end -->"


def rows_markdown(points, records) -> str:
    """Per-row table of docs/validation.md: measured / modelled per metric, default efficiencies."""
    by = {}
    for r in records:
        by.setdefault(r["row"], {})[r["metric"]] = r
    out = [
        "| row | system | model, precision | engine | layout | ISL/OSL | conc | TPOT ms meas / model | TTFT ms meas / model | out tok/s/GPU meas / model | set |",
        "|---:|---|---|---|---|---|---:|---|---|---|---|",
    ]
    for p in points:
        if p.row not in by:
            continue
        d = by[p.row]

        def cell(k, d=d):
            r = d.get(k)
            return f"{r['measured']:.4g} / {r['modelled']:.4g} ({r['ratio']:.2f})" if r else "–"

        if p.disagg:
            lay = f"P {p.prefill_workers}×tp{p.prefill.tp} / D {p.decode_workers}×tp{p.decode.tp}"
        else:
            w = p.worker
            lay = f"tp{w.tp} ep{w.ep}" + (" dp-attn" if w.dp_attention else "")
        tag = (
            "acceptance"
            if next(iter(d.values()))["acceptance"]
            else ("saturated" if p.saturated else ("disagg" if p.disagg else ""))
        )
        out.append(
            f"| {p.row} | {p.hardware} | {p.model} {p.precision} | {p.framework} | {lay} | "
            f"{p.isl_tokens}/{p.osl_tokens} | {p.concurrency} | {cell('tpot_ms')} | "
            f"{cell('ttft_ms')} | {cell('output_tok_s_per_gpu')} | {tag} |"
        )
    return "\n".join(out)


def test_validation_doc_row_table_is_current(measured, all_records):
    assert_block_current(DOC, BEGIN, END, rows_markdown(measured[0], all_records))


def test_unservable_layout_names_row_and_field(tmp_path):
    f, res = _run(tmp_path, f"{HEADER}\n{GOOD.replace('tp8 ep1', 'tp16 ep1')}\n")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {f}: row 0: field 'parallelism': tp16 ep1 on 16 GPUs cannot be served: "
        "tp 16 exceeds the 8-GPU scale-up domain of h200\n"
    )


def test_cli_mtp_rows_take_the_recipe_draft_length_unless_given(measured):
    def tpot(args):
        res = CliRunner().invoke(cli, ["validate", str(MEASURED), "--json", *args])
        assert res.exit_code == 0, res.output
        pts = json.loads(res.output)["points"]
        return {p["row"]: p["modelled"] for p in pts if p["metric"] == "tpot_ms"}

    recipe, one, three = (
        tpot(["--acceptance", "0.5"]),
        tpot(["--acceptance", "0.5", "--draft-tokens", "1"]),
        tpot(["--acceptance", "0.5", "--draft-tokens", "3"]),
    )
    # rows 47 and 58 draft 1 token, 44, 45 and 48 draft 3 (serving/recipes.py); others unchanged
    assert recipe[47] == one[47] and recipe[58] == one[58]
    assert recipe[44] == three[44] and recipe[48] == three[48] and recipe[48] != one[48]
    assert recipe[0] == one[0] == three[0]
