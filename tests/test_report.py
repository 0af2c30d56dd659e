"""``agentx report``: one self-contained HTML file, byte-identical for the same runs, with exports."""

from __future__ import annotations

import json
import re

import pytest
from _runs_fixture import make_runs, write_trace_file
from click.testing import CliRunner

from agentx.analysis.report import VL_VERSION, build_report, table_html
from agentx.cli import cli
from agentx.fmt import num


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    trace = write_trace_file(root / "trace.parquet")
    make_runs(root / "runs", trace)
    return root / "runs"


@pytest.fixture(scope="module")
def built(runs):
    return build_report([runs])


def h2(page: str) -> list[str]:
    """The section titles of a report, in order."""
    return re.findall(r'<h2 id="[a-z0-9-]+">([^<]*)</h2>', page)


def section(page: str, title: str) -> str:
    """The HTML of one section (from its heading to the next)."""
    i = page.index(f">{title}</h2>")
    j = page.find("<h2 id=", i)
    return page[i : j if j > 0 else len(page)]


def specs_of(page: str) -> dict:
    m = re.search(r"const specs = (\{.*?\});\n", page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_report_is_self_contained(built):
    page, charts = built
    # no network at view time: no external scripts, stylesheets or fetches
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert "cdn.jsdelivr" not in page and "unpkg.com" not in page
    assert "window.vegaEmbed=" in page  # the inlined bundle defines it
    specs = specs_of(page)
    assert len(specs) == len(charts) == 7
    assert f'data-charts="{len(specs)}"' in page
    for cid in specs:
        assert f'id="{cid}"' in page
    assert all(
        s["$schema"].startswith(f"https://vega.github.io/schema/vega-lite/v{VL_VERSION}")
        for s in specs.values()
    )
    titles = h2(page)
    for title in (
        "Where the time and energy go",
        "KV traffic between tiers",
        "HBM per GPU: what fills it",
        "KV cache: hit ratio against capacity",
        "Latency against throughput per stage",
        "Serving over time",
    ):
        assert title in titles
        assert '<div class="chart"' in section(page, title)
    # the answer comes before every section, and names every replay's figures
    assert page.index('<section id="answer">') < page.index("<h2 id=")


def test_report_tables_hold_the_figures(runs, built):
    import polars as pl

    page, _ = built
    c = pl.read_parquet(runs / "replay-gb200" / "calls.parquet")
    jpt = c["total_energy_j"].sum() / c["output_tokens"].sum()
    assert f'<td class="n">{num(jpt)}</td>' in section(page, "Energy per generated token")
    answer = page[page.index('<section id="answer">') : page.index("</section>")]
    assert f"replay-gb200 (16 × gb200): {num(jpt)} J per output token" in answer
    # one unit system: GB, ms, J; no raw bytes or seconds columns in any table
    heads = re.findall(r"<th>([^<]*)</th>", page)
    assert not [h for h in heads if h.endswith("_bytes") or h.endswith("_bytes_per_gpu")]


def test_cli_writes_html_and_exports_byte_identical(runs, tmp_path):
    out, png = tmp_path / "r.html", tmp_path / "png"
    r = CliRunner().invoke(cli, ["report", str(runs), "-o", str(out), "--png-dir", str(png)])
    assert r.exit_code == 0, r.output
    first = out.read_bytes()
    svgs, pngs = sorted(png.glob("*.svg")), sorted(png.glob("*.png"))
    assert len(svgs) == len(pngs) == 7
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert all(b"<svg" in p.read_bytes()[:400] for p in svgs)
    r = CliRunner().invoke(cli, ["report", str(runs), "-o", str(out), "-q"])
    assert r.exit_code == 0 and r.output == "" and out.read_bytes() == first


def test_cli_json_names_the_files_and_the_answer(runs, tmp_path):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["report", str(runs), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["written"] == [str(out)]
    assert got["answer"][0].startswith("replay-b200 (16 × b200): ")
    assert all(line in out.read_text() for line in got["answer"])


def test_cli_errors(runs, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(cli, ["report", str(empty), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 1
    assert r.output == f"Error: {empty}: no run directories found (no run.json below)\n"
    assert not (tmp_path / "r.html").exists()
    r = CliRunner().invoke(cli, ["report", str(runs), "-o", str(runs / "r.parquet")])
    assert r.exit_code == 2 and not (runs / "r.parquet").exists()
    assert r.output == "Error: the report is HTML; name the output *.html, got 'r.parquet'\n"
    html_in = runs / "old.html"
    html_in.write_text("<p>mine</p>")
    r = CliRunner().invoke(cli, ["report", str(runs), str(html_in), "-o", str(html_in)])
    assert r.exit_code == 2 and "is the input" in r.output and html_in.read_text() == "<p>mine</p>"
    html_in.unlink()
    r = CliRunner().invoke(cli, ["report", str(runs)])
    assert r.exit_code == 2 and "Missing option '-o'" in r.output


def test_table_html_escapes_and_formats():
    import polars as pl

    html = table_html(pl.DataFrame({"name": ["<b>"], "bytes": [1.5e11], "ok": [True]}))
    assert "&lt;b&gt;" in html and "1.500e+11" in html and ">yes<" in html


def test_report_inside_a_run_folder_and_of_files(runs, tmp_path):
    """The README writes the report into the run folder; traces and kv-curve files join in."""
    from _runs_fixture import kv_curve, write_trace_file

    from agentx.io import write_parquet_atomic

    trace = write_trace_file(tmp_path / "w.parquet")
    curve = tmp_path / "curve.parquet"
    write_parquet_atomic(kv_curve(), curve, {"agentx.kv_curve": "gb200 kimi-k2 gpus=32"})
    out = runs / "replay-b200" / "report.html"
    r = CliRunner().invoke(
        cli, ["report", str(runs / "replay-b200"), str(trace), str(curve), "-o", str(out), "-q"]
    )
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert {"Traces", "Context growth (w)", "KV cache: hit ratio against capacity"} <= set(h2(page))
    assert specs_of(page)  # charts are there
    out.unlink()


def test_headline_and_verdicts(built, runs):
    import polars as pl

    page, _ = built
    titles = h2(page)
    assert "Headline figures per run" in titles and "Agreement with published claims" in titles
    assert not [t for t in titles if "SEED" in t or "1 = " in t]  # words a reader knows
    claims = section(page, "Agreement with published claims")
    assert (
        '<td class="s">seed19_gb200_leads_decode_most_of_curve</td><td class="s">agrees</td>'
        in claims
    )
    # the simulate run's energy key lands in the same column as the replays'
    head = section(page, "Headline figures per run")
    assert (
        '<td class="s">sim</td><td class="s">gb200</td><td class="n">64</td><td class="n">2.5</td>'
        in head
    )
    assert "tpot_p50_ms" not in head  # no run has one: the empty column is left out
    # the KV table per tier: capacity per GPU in GB and the share of reused tokens served
    tiers = section(page, "KV cache tiers")
    c = pl.read_parquet(runs / "replay-gb200" / "calls.parquet")
    pct = 100 * c["kv_hbm_hit_tokens"].sum() / c["reused_prefix_tokens"].sum()
    assert (
        f'<td class="s">replay-gb200</td><td class="s">hbm</td><td class="n">40</td>'
        f'<td class="n">{num(pct)}</td>'
    ) in tiers
    links = section(page, "KV traffic between tiers")
    gb = c["kv_dram_to_hbm_bytes"].sum() / 1e9
    assert (
        f'<td class="s">replay-gb200</td><td class="s">dram_to_hbm</td><td class="n">{num(gb)}</td>'
        f'<td class="n">{num(gb / 50 * 1e3)}</td>'
    ) in links


PRODUCERS = (
    "agentx.cli.cmd_synth",
    "agentx.cli.cmd_replay",
    "agentx.cli.cmd_sweep",
    "agentx.cli.cmd_simulate",
    "agentx.cli.cmd_kvcurve",
)


def test_views_and_report_over_real_producer_runs(tmp_path):
    """The real commands' outputs (replay ×2, sweep, simulate, kv-curve) through views, queries, report."""
    import importlib.util

    import polars as pl

    from agentx.analysis import get_query, open_db

    missing = [m for m in PRODUCERS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"producer {', '.join(missing)} not available")
    t, r = tmp_path / "s.parquet", tmp_path / "runs"
    steps = [
        ["synth", "-o", t, "--sessions", "4", "--seed", "3"],
        ["replay", t, "--hw", "gb200", "--gpus", "16", "-o", r / "replay-gb200", "-q"],
        ["replay", t, "--hw", "b200", "--gpus", "16", "-o", r / "replay-b200", "-q"],
        ["sweep", "--hw", "b200,gb200", "--gpus", "16", "-o", r / "sweep", "-q"],
        ["simulate", t, "--hw", "gb200", "--gpus", "16", "-o", r / "sim", "-q"],
        ["kv-curve", t, "--hw", "gb200", "--gpus", "16", "-o", r / "kv", "-q"],
    ]
    for args in steps:
        res = CliRunner().invoke(cli, [str(a) for a in args])
        assert res.exit_code == 0, (args[0], res.output)
    with open_db([t], [r]) as db:
        assert {
            "calls",
            "sessions",
            "replay_calls",
            "stages",
            "footprint",
            "sweep",
            "sim_calls",
            "sim_timeseries",
            "kv_curve",
        } <= set(db.views)
        curve = pl.read_parquet(r / "kv" / "kv_curve.parquet")
        assert db.query("SELECT * EXCLUDE (run) FROM kv_curve").equals(curve)
        assert db.query("SELECT kind FROM runs WHERE run = 'kv'")["kind"].to_list() == ["kv-curve"]
        e = db.query(get_query("energy_per_stage").sql)
        stages = pl.read_parquet(r / "replay-b200" / "stages.parquet")
        got = e.filter(pl.col("run") == "replay-b200").sort("stage")["energy_j"].to_list()
        assert got == pytest.approx(stages.sort("stage")["energy_j"].to_list())
        hbm = (
            db.query(get_query("peak_hbm_per_gpu").sql)
            .filter(pl.col("run") == "replay-gb200")
            .row(0, named=True)
        )
        assert hbm["hbm_bytes_per_gpu"] == pytest.approx(
            json.loads((r / "replay-gb200" / "summary.json").read_text())["hbm_peak_bytes_per_gpu"]
        )
        assert db.query("SELECT DISTINCT system FROM runs WHERE kind = 'replay' ORDER BY 1")[
            "system"
        ].to_list() == ["b200", "gb200"]
        assert db.query(get_query("best_throughput").sql).height > 0
        # replays run the KV tier model by default: four links per replay run; a kv-curve run
        # reports its configured capacities' point the same way
        links = db.query(get_query("bytes_per_tier_link").sql)
        assert links.group_by("run").len().sort("run").rows() == [
            ("kv", 4),
            ("replay-b200", 4),
            ("replay-gb200", 4),
        ]
        tiers = json.loads((r / "replay-b200" / "summary.json").read_text())["kv_tiers"]
        got = links.filter((pl.col("run") == "replay-b200") & (pl.col("link") == "hbm_to_dram"))[
            "bytes"
        ].item()
        assert got == tiers["bytes"]["hbm_to_dram"]
    page, charts = build_report([r, t])
    slugs = {s.split("-", 1)[1]: spec for s, spec in charts}
    assert {
        "kv-cache-hit-ratio-against-capacity",
        "context-growth-s",
        "where-the-time-and-energy-go",
        "hbm-per-gpu-what-fills-it",
        "latency-against-throughput-per-stage",
        "serving-over-time",
    } <= set(slugs)
    # the kv-curve run's configured HBM, per GPU of its 16, is marked on its hit-ratio curve
    curve = slugs["kv-cache-hit-ratio-against-capacity"]
    kv = json.loads((r / "kv" / "summary.json").read_text())["kv_tiers"]["capacities"]
    rules = curve["datasets"][curve["layer"][1]["data"]["name"]]
    hbm = [x["capacity_gb"] for x in rules if x["tier"] == "hbm" and x["run"] == "kv"]
    assert hbm == [pytest.approx(kv["hbm_bytes"] / 1e9 / 16)]
    assert all(spec.get("width", 0) >= 600 or "column" in spec.get("encoding", {})
               for spec in slugs.values())  # fmt: skip
    assert len(page) < 5_000_000  # long simulations are binned, not inlined whole


AGENTIC = "Concurrent agent sessions: KV cache and offload"


def test_agentic_section_absent_without_agentic_runs(built):
    page, charts = built
    assert AGENTIC not in h2(page)
    assert not [s for s, _ in charts if "concurrent-agent-sessions" in s]


def test_agentic_section_with_and_without_offload(agentic_runs):
    """Two real simulate --users runs (offload none, dram): the section holds the three charts,
    coloured by each run's offload setting, and a table per run and N equal to agentic_sweep."""
    import polars as pl

    page, charts = build_report([agentic_runs["none"], agentic_runs["dram"]])
    assert AGENTIC in h2(page)
    part = section(page, AGENTIC)
    assert part.count('<div class="chart"') == 3
    ours = [spec for slug, spec in charts if "concurrent-agent-sessions" in slug]
    assert [s["title"] for s in ours] == [
        "KV cache usage over time",
        "Prefix hits vs N",
        "Throughput and TTFT vs N",
    ]
    assert ours[0]["encoding"]["row"]["field"] == "offload"  # one row per offload setting
    for spec in ours[1:]:
        assert spec["encoding"]["color"]["field"] == "offload"
        rows = spec["datasets"][spec["data"]["name"]]
        assert {r["offload"] for r in rows} == {"none", "dram"}
    assert all(s["width"] >= 600 for s in ours)
    # the table: one row per run and N, the figures of that run's agentic_sweep in %, ms, tok/s
    cells = re.findall(r"<tr>(<td.*?)</tr>", part)  # body rows (the head row holds <th>)
    got = [re.findall(r'<td class="[ns]">([^<]*)</td>', c) for c in cells]
    want = []
    for name in ("dram", "none"):  # rows sorted by run name: ag-dram, ag-none
        sweep = pl.read_parquet(agentic_runs[name] / "agentic_sweep.parquet").sort("users")
        for r in sweep.iter_rows(named=True):
            want.append(
                [f"ag-{name}", name, num(r["users"]), num(100 * r["gpu_prefix_hit_ratio"]),
                 num(100 * r["offload_hit_ratio"]), num(r["ttft_p50_s"] * 1e3),
                 num(r["tpot_p50_s"] * 1e3), num(r["output_tok_s"])]
            )  # fmt: skip
    assert got == want
    heads = re.findall(r"<th>([^<]*)</th>", part)
    assert heads == ["run", "offload", "users", "gpu_prefix_hit_pct", "offload_hit_pct",
                     "ttft_p50_ms", "tpot_p50_ms", "output_tok_s"]  # fmt: skip
    # the answer states each run's figures at its largest N, computed from the sweep
    answer = page[page.index('<section id="answer">') : page.index("</section>")]
    top = (
        pl.read_parquet(agentic_runs["dram"] / "agentic_sweep.parquet")
        .sort("users")
        .row(-1, named=True)
    )
    assert "ag-dram (8 × b200, deepseek-v3, offload dram), N=1…2 sessions" in answer
    assert (
        f"TTFT p50 {num(top['ttft_p50_s'] * 1e3)} ms and {num(top['output_tok_s'])} output tokens/s at N=2"
        in answer
    )
    assert "At N=2, ag-dram serves" in answer and "for ag-none (no offload)" in answer


def test_agentic_runs_sharing_an_offload_setting_keep_their_own_lines(agentic_runs, tmp_path):
    """Two runs with the same setting are told apart by name in the charts' colour."""
    import shutil

    for name in ("a", "b"):
        shutil.copytree(agentic_runs["none"], tmp_path / name)
    _, charts = build_report([tmp_path / "a", tmp_path / "b"])
    hits = next(
        spec
        for slug, spec in charts
        if slug.endswith("concurrent-agent-sessions-kv-cache-and-offload-2")
    )
    rows = hits["datasets"][hits["data"]["name"]]
    assert {r["offload"] for r in rows} == {"a (none)", "b (none)"}


def test_agentic_answer_names_the_knee_only_where_the_data_has_one(tmp_path):
    """The answer says where GPU prefix hits fall below 90 % of their N=1 value, computed from
    agentic_sweep; a sweep whose hits hold says nothing of a knee; a point without TTFT stays blank."""
    import polars as pl

    from agentx.analysis.report import report_answer
    from agentx.runs import write_run

    def run(name: str, hits: list[float], offload: str, ttft=(0.1, 0.2, 0.5, None)) -> None:
        users = [1, 4, 16, 64]
        sweep = pl.DataFrame(
            {"users": users, "gpu_prefix_hit_ratio": hits,
             "offload_hit_ratio": [0.0] * 4 if offload == "none" else [0.0, 0.0, 0.4, 0.9],
             "ttft_p50_s": list(ttft), "tpot_p50_s": [0.01] * 4,
             "output_tok_s": [10.0, 40.0, 90.0, 60.0]},
            schema_overrides={"ttft_p50_s": pl.Float64},
        )  # fmt: skip
        cfg = {"hw": "b200", "model": "deepseek-v3", "gpus": 8, "offload": offload}
        write_run(tmp_path / name, "simulate", {"agentic_sweep": sweep}, config=cfg)

    run("none", [0.96, 0.95, 0.5, 0.05], "none")
    run("dram", [0.96, 0.95, 0.5, 0.05], "dram", ttft=(0.1, 0.2, 0.3, 0.4))
    lines = report_answer([tmp_path / "none", tmp_path / "dram"])
    none = next(x for x in lines if x.startswith("none ("))
    assert "GPU prefix hits 96 % at N=1, 5 % at N=64 (below 90 % of it from N=16)" in none
    assert "(below 90 % of it from N=16); 60 output tokens/s at N=64." in none  # no TTFT there
    dram = next(x for x in lines if x.startswith("dram ("))
    assert "offload hits 90 % at N=64" in dram
    assert "At N=64, dram serves 95 % of prompt tokens from cache against 5 % for none" in lines[-1]
    run("flat", [0.96, 0.95, 0.94, 0.93], "none")
    (flat,) = report_answer([tmp_path / "flat"])
    assert "below" not in flat and "GPU prefix hits 96 % at N=1, 93 % at N=64" in flat
