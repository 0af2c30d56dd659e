"""Every case of issue #15's hostile test, as a regression test (see tests/_hostile.py)."""

from __future__ import annotations

import json
import os
import shutil
from itertools import combinations_with_replacement
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _hostile import SAMPLE_DIR, assert_refused, corpus, digest, invoke, leftovers
from _runs_fixture import make_runs, write_trace_file

SAMPLE = SAMPLE_DIR / "weka-sample.parquet"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    trace = write_trace_file(root / "t.parquet")
    make_runs(root / "runs", trace)
    raw = corpus(root / "raw")
    return root, trace, raw


# --- inputs overwritten (data loss) ------------------------------------------------------


def test_import_into_its_own_source_folder_is_refused(world, tmp_path):
    _, _, raw = world
    src = tmp_path / "weka"
    shutil.copytree(raw["weka"], src)
    target = src / "trace_0026.json"
    err = assert_refused(["import", "weka", src, "-o", target], inputs=[src], codes=(2,))
    assert err == (
        f"Error: output path '{target}' lies inside the input folder '{src}'; choose another -o\n"
    )
    err = assert_refused(["import", "weka", src, "-o", src / "new.parquet"], inputs=[src])
    assert not (src / "new.parquet").exists()


@pytest.mark.parametrize(
    ("cmd", "name"),
    [
        (["replay", "--hw", "gb200"], "calls.parquet"),
        (["replay", "--hw", "gb200"], "stages.parquet"),
        (["replay", "--hw", "gb200"], "footprint.parquet"),
        (["kv-curve", "--hw", "gb200"], "kv_curve.parquet"),
        (["simulate", "--hw", "gb200"], "sim_calls.parquet"),
    ],
)
def test_run_folder_holding_the_trace_is_refused(world, tmp_path, cmd, name):
    _, trace, _ = world
    d = tmp_path / "D"
    d.mkdir()
    t = d / name
    shutil.copy(trace, t)
    err = assert_refused([cmd[0], t, *cmd[1:], "-o", d, "-q"], inputs=[d], codes=(2,))
    assert err == (
        f"Error: output path '{d}' holds the input '{t}' and would overwrite it; choose another -o\n"
    )


def test_output_equal_to_input_through_a_symlink_is_refused(world, tmp_path):
    _, trace, _ = world
    t = tmp_path / "t.parquet"
    shutil.copy(trace, t)
    (tmp_path / "link.parquet").symlink_to(t)
    assert_refused(
        ["synth", "--like", t, "-o", tmp_path / "link.parquet", "--sessions", "2"],
        inputs=[t],
        codes=(2,),
        contains="is the input",
    )


def test_a_folder_that_is_not_a_run_is_never_replaced(world, tmp_path):
    _, trace, _ = world
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("precious")
    err = assert_refused(["replay", trace, "--hw", "gb200", "-o", d, "-q"], inputs=[d], codes=(2,))
    assert "holding files that are not one agentx run" in err
    assert (d / "notes.txt").read_text() == "precious"


# --- unwritable and odd output paths -------------------------------------------------------


@pytest.mark.parametrize("out", ["/proc/agentx-x", "/sys/agentx-x", "/proc/agentx-x/y.parquet"])
@pytest.mark.parametrize(
    "cmd",
    [
        ["replay", "{t}", "--hw", "gb200", "-q"],
        ["kv-curve", "{t}", "--hw", "gb200", "-q"],
        ["simulate", "{t}", "--hw", "gb200", "-q"],
        ["synth", "--sessions", "2"],
        ["import", "mooncake", "{m}"],
        ["sql", "SELECT 1", "--format", "csv"],
        ["sweep", "seed-study", "--hw", "gb200", "--gpus", "8", "-q"],
    ],
)
def test_unwritable_output_is_one_line(world, out, cmd):
    _, trace, raw = world
    args = [a.format(t=trace, m=raw["mooncake"]) for a in cmd]
    assert_refused([*args, "-o", out], inputs=[trace, raw["mooncake"]])


@pytest.mark.parametrize(
    "cmd", [["replay", "{t}", "--hw", "gb200"], ["synth"], ["import", "mooncake", "{m}"]]
)
def test_empty_output_path_is_refused(world, cmd):
    _, trace, raw = world
    args = [a.format(t=trace, m=raw["mooncake"]) for a in cmd]
    err = assert_refused([*args, "-o", ""], codes=(2,))
    assert "expected a path, got an empty string" in err


def test_kv_curve_onto_a_folder_named_parquet(world, tmp_path):
    _, trace, _ = world
    d = tmp_path / "x.parquet"
    d.mkdir()
    assert_refused(["kv-curve", trace, "--hw", "gb200", "-o", d, "-q"], inputs=[trace], codes=(2,))
    assert d.is_dir() and not list(d.iterdir())


# --- the SQL sandbox -----------------------------------------------------------------------

SANDBOX_QUERIES = [
    "SELECT content FROM read_text('{f}')",
    "SELECT content FROM read_blob('{f}')",
    "SELECT * FROM read_csv('{f}')",
    "SELECT * FROM read_csv_auto('{f}')",
    "SELECT * FROM read_json('{f}')",
    "SELECT * FROM read_json_auto('{f}')",
    "SELECT * FROM read_ndjson('{f}')",
    "SELECT * FROM read_parquet('{f}')",
    "SELECT * FROM parquet_metadata('{f}')",
    "SELECT * FROM sniff_csv('{f}')",
    "SELECT * FROM glob('{d}/*')",
    "SELECT * FROM '{f}'",
    "COPY (SELECT 'clobbered') TO '{f}'",
    "COPY (SELECT 'x') TO '{d}/new.csv'",
    "CREATE TABLE t AS SELECT 1 AS a; COPY t FROM '{f}'",
    "EXPORT DATABASE '{d}/exp'",
    "IMPORT DATABASE '{d}'",
    "ATTACH '{d}/x.db'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "LOAD '{d}/x.duckdb_extension'",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET temp_directory = '{d}'",
    "SET allowed_directories = ['/']",
    "SET lock_configuration = false",
    "PRAGMA enable_profiling",
    "SET profiling_output = '{d}/p.txt'",
    "SET log_query_path = '{d}/q.log'",
    "CREATE TABLE big AS SELECT range AS i FROM range(10); CHECKPOINT; COPY big TO '{d}/big.parquet'",
]


@pytest.mark.parametrize("query", SANDBOX_QUERIES)
@pytest.mark.parametrize("where", ["relative", "absolute", "tmp"])
def test_sql_reads_and_writes_no_file(world, tmp_path, monkeypatch, query, where):
    _, trace, _ = world
    monkeypatch.chdir(tmp_path)
    d = {"relative": ".tmp", "absolute": str(tmp_path / "abs"), "tmp": ".tmp"}[where]
    Path(d).mkdir(exist_ok=True)
    canary = Path(d) / "canary.txt"
    canary.write_text("secret\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = invoke(["sql", query.format(f=canary, d=d), trace, "--format", "json"])
    assert "secret" not in r.output
    assert canary.read_text() == "secret\n"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    if r.exit_code != 0:
        assert r.exit_code == 1 and len(r.stderr.splitlines()) == 1, r.output


# --- DuckDB types in every output format ---------------------------------------------------

TYPED = {
    "INTERVAL": "INTERVAL 3 DAY",
    "UNION": "union_value(k := 1)::UNION(k INT, s VARCHAR)",
    "STRUCT": "{'a': 1, 'b': [1, 2]}",
    "MAP": "MAP {'a': 1}",
    "LIST": "[1, 2, 3]",
    "ARRAY": "[1, 2, 3]::INT[3]",
    "BLOB": "'\\xAA\\x00'::BLOB",
    "BIT": "'0101'::BIT",
    "HUGEINT": "170141183460469231731687303715884105727::HUGEINT",
    "UHUGEINT": "340282366920938463463374607431768211455::UHUGEINT",
    "VARINT": "'1234567890123456789012345678901234567890'::VARINT",
    "nested NaN": "[1.0, 'nan'::DOUBLE, 'inf'::DOUBLE]",
    "struct inf": "{'x': '-inf'::DOUBLE}",
    "DATE infinity": "'infinity'::DATE",
    "year 5000000": "'5000000-01-01'::DATE",
    "TIMESTAMPTZ": "'2020-01-01 00:00:00+00'::TIMESTAMPTZ",
    "TIMETZ": "'12:00:00+02'::TIMETZ",
    "LIST of INTERVAL": "[INTERVAL 1 DAY]",
    "LIST of HUGEINT": "[1::HUGEINT]",
    "ENUM": "'a'::ENUM('a', 'b')",
    "NULL": "NULL",
    "UUID": "'0e5f2c3e-1b9f-4d5e-8f00-000000000001'::UUID",
}


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "parquet"])
@pytest.mark.parametrize("name", sorted(TYPED))
def test_every_duckdb_type_renders(tmp_path, name, fmt):
    out = tmp_path / "q.parquet"
    args = ["sql", f"SELECT {TYPED[name]} AS c", "--format", fmt]
    r = invoke(args + (["-o", str(out)] if fmt == "parquet" else []))
    assert r.exit_code == 0, r.output
    if fmt == "json":
        rows = json.loads(r.stdout, parse_constant=strict)
        assert list(rows[0]) == ["c"]
    if fmt == "parquet":
        assert pq.read_table(out).num_rows == 1


def test_wide_integers_stay_exact():
    r = invoke(
        [
            "sql",
            "SELECT 170141183460469231731687303715884105727::HUGEINT AS h, 3::HUGEINT AS s",
            "--format",
            "json",
        ]
    )
    assert json.loads(r.stdout) == [{"h": "170141183460469231731687303715884105727", "s": 3}]


# --- damaged run folders --------------------------------------------------------------------

DAMAGE = {
    "summary not JSON": ("summary.json", "{not json"),
    "summary NaN": ("summary.json", '{"x": NaN}'),
    "summary a list": ("summary.json", "[1, 2]"),
    "summary a folder": ("summary.json", None),
    "run.json a list": ("run.json", "[]"),
    "run.json not UTF-8": ("run.json", b"\xff\xfe"),
    "run.json kind a number": ("run.json", '{"kind": 3}'),
    "run.json config a list": ("run.json", '{"kind": "replay", "config": []}'),
    "run.json deep": ("run.json", "[" * 100_000 + "]" * 100_000),
    "table not Parquet": ("calls.parquet", "PAR1 nonsense"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_run_folder_is_one_line(world, tmp_path, case):
    root, _, _ = world
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs" / "replay-b200", runs / "r")
    name, content = DAMAGE[case]
    f = runs / "r" / name
    f.unlink()
    if content is None:
        f.mkdir()
    elif isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    for q in ("SELECT * FROM runs", "SELECT * FROM summary"):
        assert_refused(["sql", q, "--runs", runs], inputs=[runs], codes=(1,))


# --- canonical traces ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "column", ["session_id", "t_start_s", "input_tokens", "new_tokens", "is_compaction", "source"]
)
def test_inspect_names_a_missing_column(world, tmp_path, column):
    _, trace, _ = world
    t = pq.read_table(trace)
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.drop([column]), bad)
    err = assert_refused(["inspect", bad], inputs=[bad], codes=(1,))
    assert f"field '{column}': missing column" in err


@pytest.mark.parametrize(
    "cmd",
    [
        ["replay", "--hw", "gb200", "-q"],
        ["kv-curve", "--hw", "gb200", "-q"],
        ["simulate", "--hw", "gb200", "-q", "-o", "{o}"],
        ["inspect"],
    ],
)
def test_null_typed_block_hashes_are_read(world, tmp_path, cmd):
    _, trace, _ = world
    t = pq.read_table(trace)
    i = t.schema.get_field_index("block_hashes")
    t = t.set_column(i, "block_hashes", pa.nulls(t.num_rows))
    src = tmp_path / "nullbh.parquet"
    pq.write_table(t, src)
    r = invoke([cmd[0], src, *[a.format(o=tmp_path / "o") for a in cmd[1:]]])
    assert r.exit_code == 0, r.output


def test_sql_over_null_block_hashes_and_a_run_calls_table(world, tmp_path):
    root, trace, _ = world
    calls = root / "runs" / "replay-b200" / "calls.parquet"
    r = invoke(["sql", "SELECT count(*) AS n FROM calls", trace, calls, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"n": pl.read_parquet(trace).height}]
    r = invoke(["sql", "SELECT count(*) AS n FROM replay_calls", trace, calls, "--format", "json"])
    assert r.exit_code == 0, r.output


def test_parquet_metadata_that_is_not_utf8(world, tmp_path):
    _, trace, _ = world
    t = pq.read_table(trace)
    bad = tmp_path / "meta.parquet"
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, b"x": b"\xff\xfe"}), bad)
    for args in (["inspect", bad], ["sql", "SELECT count(*) FROM calls", bad]):
        r = invoke(args)
        assert r.exit_code == 0 and "panicked" not in r.output, r.output


def test_simulate_on_zero_rows_leaves_nothing(world, tmp_path):
    _, trace, _ = world
    zero = tmp_path / "zero.parquet"
    pq.write_table(pq.read_table(trace).slice(0, 0), zero)
    out = tmp_path / "sim"
    err = assert_refused(
        ["simulate", zero, "--hw", "gb200", "-o", out, "-q"], inputs=[zero], output=out
    )
    assert "holds no calls" in err


@pytest.mark.parametrize(
    ("a", "b"),
    list(combinations_with_replacement(["weka", "mooncake", "azure", "tracelab", "synth"], 2)),
)
def test_sql_over_traces_of_any_two_importers(world, tmp_path, a, b):
    _, trace, raw = world
    paths = {}
    for fmt in {a, b}:
        out = tmp_path / f"{fmt}.parquet"
        if fmt == "synth":
            shutil.copy(trace, out)
        else:
            r = invoke(["import", fmt, raw[fmt], "-o", out, "-q"])
            assert r.exit_code == 0, r.output
        paths[fmt] = out
    second = paths[b]
    if a == b:
        second = tmp_path / f"{b}-2.parquet"
        shutil.copy(paths[b], second)
    r = invoke(
        [
            "sql",
            "SELECT trace, count(*) AS n FROM calls GROUP BY 1 ORDER BY 1",
            paths[a],
            second,
            "--format",
            "json",
        ]
    )
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 2


# --- importers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "name"), [("weka", "trace_0001.json"), ("mooncake", "m.jsonl"), ("tracelab", "t.jsonl")]
)
def test_json_nested_100000_deep(tmp_path, fmt, name):
    src = tmp_path / name
    src.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = tmp_path / "o.parquet"
    err = assert_refused(["import", fmt, src, "-o", out], inputs=[src], output=out, codes=(1,))
    assert "nested too deeply" in err


@pytest.mark.parametrize("fmt", ["weka", "mooncake", "azure", "tracelab"])
def test_fifo_is_refused_without_blocking(tmp_path, fmt):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    out = tmp_path / "o.parquet"
    assert_refused(["import", fmt, fifo, "-o", out], output=out, codes=(1,))


def test_file_name_not_utf8_and_newline(world, tmp_path):
    _, _, raw = world
    d = tmp_path / "w"
    d.mkdir()
    data = (raw["weka"] / "trace_0026.json").read_bytes()
    (
        Path(os.fsencode(d).decode("utf-8", "surrogateescape")) / os.fsdecode(b"trace_\xff\nx.json")
    ).write_bytes(data)
    out = tmp_path / "o.parquet"
    err = assert_refused(["import", "weka", d, "-o", out], inputs=[d], output=out, codes=(1,))
    assert "\\n" in err and "not valid UTF-8" in err


def test_directory_symlink_loop(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    d = tmp_path / "d"
    d.mkdir()
    (d / "self").symlink_to(d)
    for src in (loop, d):
        out = tmp_path / "o.parquet"
        assert_refused(["import", "weka", src, "-o", out], output=out, codes=(1,))


def test_newline_in_a_session_id_stays_on_one_line(tmp_path):
    bad = json.dumps({**json.loads(TRACELAB_FIRST), "session_id": "a\nb", "output_tokens": -1})
    src = tmp_path / "t.jsonl"
    src.write_text(bad + "\n")
    assert_refused(
        ["import", "tracelab", src, "-o", tmp_path / "o.parquet"], inputs=[src], codes=(1,)
    )


from _hostile import TRACELAB  # noqa: E402

TRACELAB_FIRST = TRACELAB.splitlines()[0]


@pytest.mark.parametrize(
    ("case", "mutate"),
    [
        (
            "hash ids with leading zeros",
            lambda s: s.replace('"hash_ids": [1, 2', '"hash_ids": [01, 2', 1),
        ),
        ("in as an object", lambda s: s.replace('"in": ', '"in": {"a": 1}, "x": ', 1)),
        (
            "input_types of objects",
            lambda s: s.replace('"input_types": [', '"input_types": [{"a": 1}, ', 1),
        ),
        ("t as an object", lambda s: s.replace('"t": 0.0', '"t": {}', 1)),
    ],
)
def test_weka_refuses(world, tmp_path, case, mutate):
    _, _, raw = world
    text = (raw["weka"] / "trace_0026.json").read_text()
    bad = mutate(text)
    assert bad != text, case
    src = tmp_path / "trace_0026.json"
    src.write_text(bad)
    out = tmp_path / "o.parquet"
    assert_refused(["import", "weka", src, "-o", out], inputs=[src], output=out, codes=(1,))


@pytest.mark.parametrize("year", ["1000", "9999", "1969"])
def test_azure_years_out_of_range(tmp_path, year):
    src = tmp_path / "a.csv"
    src.write_text(
        f"TIMESTAMP,ContextTokens,GeneratedTokens\n{year}-11-16 18:15:46.6805900,374,44\n"
    )
    out = tmp_path / "o.parquet"
    err = assert_refused(["import", "azure", src, "-o", out], inputs=[src], output=out, codes=(1,))
    assert "field 'TIMESTAMP'" in err and "line 2" in err


# --- options, catalogs, scenarios ----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "{t}", "--hw", "gb200", "--routing-skew", "nan"],
        ["replay", "{t}", "--hw", "gb200", "--routing-skew", "inf"],
        ["replay", "{t}", "--hw", "gb200", "--gpus", "100000000000000000000000"],
        ["plan", "--pp", "0"],
        ["plan", "--gpus-per-stage", "0"],
        ["plan", "--headroom", "nan"],
        ["plan", "--headroom", "1.5"],
        ["simulate", "{t}", "--hw", "gb200", "--tpot-target-s", "-1", "-o", "{o}"],
        ["simulate", "{t}", "--hw", "gb200", "--max-batch", "1000000000000", "-o", "{o}"],
        ["synth", "--seed", "-1", "-o", "{o}"],
        ["import", "weka", "{w}", "--seed", "-1", "-o", "{o}"],
        ["kv-curve", "{t}", "--hw", "gb200", "--capacities-gb", "nan"],
    ],
    ids=lambda a: " ".join(a[:1] + a[-4:]),
)
def test_impossible_options_are_refused(world, tmp_path, args):
    _, trace, raw = world
    out = tmp_path / "o"
    argv = [a.format(t=trace, o=out, w=raw["weka"]) for a in args]
    assert_refused(argv, inputs=[trace], output=out, codes=(2,))


@pytest.mark.parametrize(
    "entry",
    [
        '[systems.x]\nbase = "gb200"\nscale_out_bytes_per_s = 0',
        '[systems.x]\nbase = "gb200"\nhost_link_bytes_per_s = 0',
        '[systems.x]\nbase = "gb200"\nhost_dram_bytes_per_s = 0',
        '[systems.x]\nbase = "gb200"\nssd_bytes_per_s = 0',
        '[systems.x]\nbase = "gb200"\ngpus_per_node = inf',
        '[systems.x]\nbase = "gb200"\nscale_up_bytes_per_s = nan',
        '[systems.x]\nbase = "gb200"\nhost_dram_bytes = -1',
        '[chips.z]\nbase = "b200"\nbf16_flops_per_s = 0\n[systems.x]\nbase = "gb200"\nchip = "z"',
        '[chips.z]\nbase = "b200"\nhbm_bytes = inf\n[systems.x]\nbase = "gb200"\nchip = "z"',
        '[models.x]\nbase = "kimi-k2"\nnum_layers = inf',
        '[models.x]\nbase = "kimi-k2"\nnum_layers = 0',
    ],
)
def test_impossible_catalog_numbers(world, tmp_path, entry):
    _, trace, _ = world
    cat = tmp_path / "c.toml"
    cat.write_text(entry + "\n")
    model = ["--model", "x"] if "[models.x]" in entry else []
    hw = "x" if "[systems.x]" in entry else "gb200"
    err = assert_refused(
        ["replay", trace, "--hw", hw, *model, "--catalog", cat, "-q"], inputs=[cat], codes=(1,)
    )
    assert str(cat) in err


@pytest.mark.parametrize(
    "body",
    [
        'systems = 1\ngpus = [8]\nmodel = "kimi-k2"',
        'systems = [1]\ngpus = [8]\nmodel = "kimi-k2"',
        'systems = ["gb200"]\ngpus = [8]\nmodel = "kimi-k2"\n[checks]\nhbm_limit_bytes = "x"',
        'systems = ["gb200"]\ngpus = ["8"]\nmodel = "kimi-k2"',
        'systems = ["gb200"]\ngpus = [8]\nmodel = 3',
    ],
)
def test_scenario_with_wrong_types(tmp_path, body):
    sc = tmp_path / "sc.toml"
    sc.write_text("[scenario]\n" + body + "\n")
    out = tmp_path / "sw"
    assert_refused(["sweep", sc, "-o", out, "-q"], inputs=[sc], output=out, codes=(1,))


# --- strict --json --------------------------------------------------------------------------


def strict(constant: str):
    pytest.fail(f"{constant} is not JSON")


def test_json_is_strict_for_the_bundled_sweep_and_simulate(world, tmp_path):
    _, trace, _ = world
    for args in (
        [
            "sweep",
            "seed-study",
            "--hw",
            "gb200",
            "--gpus",
            "16",
            "-o",
            tmp_path / "sw",
            "--json",
            "-q",
        ],
        [
            "simulate",
            trace,
            "--hw",
            "gb200",
            "--json",
            "--sample-s",
            "1",
            "-o",
            tmp_path / "sim",
            "-q",
        ],
    ):
        r = invoke(args)
        assert r.exit_code == 0, r.output
        json.loads(r.stdout, parse_constant=strict)
    for f in (tmp_path / "sw" / "summary.json", tmp_path / "sim" / "summary.json"):
        json.loads(f.read_text(), parse_constant=strict)


def test_no_temporaries_survive_a_failed_write(world, tmp_path):
    _, trace, _ = world
    out = tmp_path / "r"
    assert invoke(["replay", trace, "--hw", "gb200", "-o", out, "-q"]).exit_code == 0
    before = digest([out])
    assert_refused(["replay", trace, "--hw", "nope", "-o", out, "-q"], inputs=[trace], codes=(2,))
    assert digest([out]) == before and leftovers(tmp_path) == []


# --- resource limits: stop early, name the limit and its knob --------------------------------


def test_a_call_past_the_token_limit(world, tmp_path, monkeypatch):
    _, trace, _ = world
    biggest = pl.read_parquet(trace)["input_tokens"].max()
    monkeypatch.setenv("AGENTX_MAX_CALL_TOKENS", str(biggest - 1))
    for args in (
        ["inspect", trace],
        ["replay", trace, "--hw", "gb200", "-q"],
        ["sql", "SELECT 1", trace],
    ):
        err = assert_refused(args, inputs=[trace], codes=(1,))
        assert f"{biggest:,} tokens in one call is past the limit of {biggest - 1:,}" in err
        assert "set AGENTX_MAX_CALL_TOKENS to raise it" in err
    monkeypatch.setenv("AGENTX_MAX_CALL_TOKENS", "10**12")
    assert_refused(
        ["inspect", trace], codes=(1,), contains="AGENTX_MAX_CALL_TOKENS must be an integer"
    )


def test_a_trace_past_the_call_limit(world, tmp_path, monkeypatch):
    _, trace, _ = world
    monkeypatch.setenv("AGENTX_MAX_CALLS", "10")
    assert_refused(
        ["inspect", trace],
        inputs=[trace],
        codes=(1,),
        contains="calls in one trace is past the limit of 10 (set AGENTX_MAX_CALLS",
    )
    out = tmp_path / "s.parquet"
    assert_refused(
        ["synth", "--calls", "11", "-o", out], output=out, codes=(1,), contains="AGENTX_MAX_CALLS"
    )
    monkeypatch.delenv("AGENTX_MAX_CALLS")
    assert_refused(
        ["synth", "--sessions", "9223372036854775807", "-o", out],
        output=out,
        codes=(1,),
        contains="AGENTX_MAX_CALLS",
    )


def test_simulate_intervals_past_the_limit(world, tmp_path):
    _, trace, _ = world
    out = tmp_path / "sim"
    err = assert_refused(
        ["simulate", trace, "--hw", "gb200", "--sample-s", "1e-300", "-o", out, "-q"],
        inputs=[trace],
        output=out,
        codes=(1,),
    )
    assert "time-series intervals is past the limit" in err and "AGENTX_MAX_INTERVALS" in err


# --- the one JSON encoder -------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentx.io import dumps_json  # noqa: E402

nested = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=20,
)


@given(nested)
def test_dumps_json_is_strict_and_keeps_every_finite_value(obj):
    back = json.loads(dumps_json(obj), parse_constant=strict)

    def same(a, b):
        if isinstance(a, float) and a != a or a in (float("inf"), float("-inf")):
            return b is None
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return a == b

    assert same(obj, back)
