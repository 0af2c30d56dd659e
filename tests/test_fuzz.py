"""Hypothesis fuzzing of every door a user has: importers' bytes, canonical Parquet, run folders,
SQL, catalogs and options. Each example must end in success or the one-line refusal of
tests/_hostile.py: never a traceback or panic, nothing at -o on failure, inputs unchanged,
and no file read or written by a query.
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _hostile import AZURE, MOONCAKE, TRACELAB, assert_ok_or_refused, digest, invoke, weka_session
from _runs_fixture import make_runs, write_trace_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=int(os.environ.get("AGENTX_FUZZ_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same cases on every CI run; raise AGENTX_FUZZ_EXAMPLES to explore
    database=None,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    trace = write_trace_file(root / "t.parquet")
    make_runs(root / "runs", trace)
    return root, trace


# --- importers: mutated bytes of a real record of each format ------------------------------

SEEDS = {
    "weka": ("trace_0026.json", json.dumps(weka_session()).encode()),
    "mooncake": ("m.jsonl", MOONCAKE.encode()),
    "azure": ("a.csv", AZURE.encode()),
    "tracelab": ("t.jsonl", TRACELAB.encode()),
}

HOSTILE_TOKENS = [
    b"NaN", b"Infinity", b"-1", b"1e400", b"007", b"null", b"true", b"{}", b"[]", b'"x"',
    b"\xff\xfe", b"\x00", b"\n", b"99999999999999999999999", b"1.5", b"[[[[", b"}", b'"\\ud800"',
    b"9999-12-31 23:59:59", b"1000-01-01 00:00:00", b",", b'"a\\nb"', b"-0",
]  # fmt: skip


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["replace", "insert", "delete", "truncate", "token"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "replace" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 16))]
        elif op == "truncate":
            del data[i:]
        else:
            # overwrite a number or a value with a hostile token
            j = i
            while j < len(data) and chr(data[j]).isalnum():
                j += 1
            data[i:j] = draw(st.sampled_from(HOSTILE_TOKENS))
    return bytes(data)


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_importers_on_mutated_bytes(tmp_path_factory, fmt, data):
    tmp = tmp_path_factory.mktemp(fmt)
    name, seed = SEEDS[fmt]
    src = tmp / name
    src.write_bytes(data.draw(mutated(seed)))
    out = tmp / "o.parquet"
    r = assert_ok_or_refused(["import", fmt, src, "-o", out, "-q"], inputs=[src], output=out)
    if r.exit_code == 0:  # what was accepted reads back as a valid trace
        assert invoke(["inspect", out, "--json"]).exit_code == 0


# --- canonical Parquet: columns dropped, retyped, nulled, corrupted --------------------------

COLUMN_TYPES = [pa.int8(), pa.int64(), pa.uint64(), pa.float64(), pa.string(), pa.bool_(),
                pa.null(), pa.list_(pa.int64()), pa.binary(), pa.timestamp("us")]  # fmt: skip


@st.composite
def damaged_table(draw, table: pa.Table) -> pa.Table:
    for _ in range(draw(st.integers(1, 3))):
        names = table.column_names
        col = draw(st.sampled_from(names))
        op = draw(st.sampled_from(["drop", "retype", "null", "negate", "nan", "dup", "reorder"]))
        i = names.index(col)
        if op == "drop":
            table = table.drop([col])
        elif op == "retype":
            t = draw(st.sampled_from(COLUMN_TYPES))
            try:
                arr = table.column(i).cast(t, safe=False)
            except (pa.ArrowException, ValueError):
                arr = pa.nulls(table.num_rows, t)
            table = table.set_column(i, col, arr)
        elif op == "null":
            table = table.set_column(i, col, pa.nulls(table.num_rows, table.schema.field(i).type))
        elif (
            op in ("negate", "nan")
            and pa.types.is_integer(table.schema.field(i).type)
            or op == "nan"
            and pa.types.is_floating(table.schema.field(i).type)
        ):
            vals = table.column(i).to_pylist()
            k = draw(st.integers(0, len(vals) - 1))
            vals[k] = (
                float("nan")
                if pa.types.is_floating(table.schema.field(i).type)
                else -(vals[k] or 1)
            )
            table = table.set_column(i, col, pa.array(vals, table.schema.field(i).type))
        elif op == "dup":
            table = pa.concat_tables([table, table.slice(0, draw(st.integers(1, 5)))])
        elif op == "reorder":
            table = table.take(list(range(table.num_rows))[::-1])
    return table


@FUZZ
@given(data=st.data())
def test_commands_on_damaged_canonical_parquet(world, tmp_path_factory, data):
    _, trace = world
    tmp = tmp_path_factory.mktemp("pq")
    src = tmp / "bad.parquet"
    base = pq.read_table(trace)
    pq.write_table(
        data.draw(damaged_table(base)).replace_schema_metadata(base.schema.metadata), src
    )
    cmd = data.draw(st.sampled_from([
        ["inspect", src, "--json"],
        ["sql", "SELECT count(*), sum(input_tokens) FROM sessions", src, "--format", "json"],
        ["kv-curve", src, "--hw", "gb200", "--capacities-gb", "1", "--json", "-q"],
        ["replay", src, "--hw", "gb200", "--no-kv-tiers", "-o", tmp / "run", "-q", "--json"],
    ]))  # fmt: skip
    assert_ok_or_refused(cmd, inputs=[src], output=tmp / "run" if cmd[0] == "replay" else None)


# --- run folders: run.json / summary.json replaced by hostile JSON ---------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(data=st.data())
def test_sql_over_damaged_run_folders(world, tmp_path_factory, data):
    root, _ = world
    runs = tmp_path_factory.mktemp("runs")
    shutil.copytree(root / "runs" / "sim", runs / "r")
    name = data.draw(st.sampled_from(["run.json", "summary.json"]))
    value = data.draw(
        json_values
        | st.dictionaries(
            st.sampled_from(["kind", "config", "inputs", "tables", "gpus", "system"]), json_values
        )
    )
    text = json.dumps(value)  # NaN and Infinity included: they must be refused
    if data.draw(st.booleans()):
        text = text[: data.draw(st.integers(0, len(text)))]
    (runs / "r" / name).write_text(text)
    q = data.draw(
        st.sampled_from(
            ["SELECT * FROM runs", "SELECT * FROM summary", "SELECT count(*) FROM sim_calls"]
        )
    )
    assert_ok_or_refused(["sql", q, "--runs", runs, "--format", "json"], inputs=[runs])


# --- SQL: no query reads or writes a file ------------------------------------------------------

FILE_FUNCS = [
    "SELECT * FROM read_text({p})", "SELECT * FROM read_blob({p})", "SELECT * FROM read_csv({p})",
    "SELECT * FROM read_json({p})", "SELECT * FROM read_parquet({p})", "SELECT * FROM glob({p})",
    "SELECT * FROM {p}", "COPY (SELECT 1) TO {p}", "COPY calls TO {p} (FORMAT parquet)",
    "EXPORT DATABASE {p}", "IMPORT DATABASE {p}", "ATTACH {p} AS x", "LOAD {p}", "INSTALL {p}",
    "SET temp_directory = {p}", "SET home_directory = {p}", "PRAGMA {p}", "SELECT * FROM sniff_csv({p})",
    "CREATE TABLE t AS SELECT * FROM read_csv_auto({p})", "SELECT * FROM parquet_schema({p})",
]  # fmt: skip


@FUZZ
@given(data=st.data())
def test_sql_sandbox(world, tmp_path_factory, monkeypatch, data):
    _, trace = world
    tmp = tmp_path_factory.mktemp("sql")
    monkeypatch.chdir(tmp)
    (tmp / ".tmp").mkdir()
    for f in (tmp / "canary.csv", tmp / ".tmp" / "canary.csv"):
        f.write_text("secret\n1\n")
    target = data.draw(st.sampled_from([
        "canary.csv", ".tmp/canary.csv", str(tmp / ".tmp" / "canary.csv"), str(tmp / "canary.csv"),
        ".tmp", "new.csv", ".tmp/new.parquet", str(tmp / ".tmp"), "/etc/passwd", "*", ".tmp/*", "",
        str(trace), "httpfs",
    ]))  # fmt: skip
    quoted = "'" + target.replace("'", "''") + "'"
    sql = data.draw(st.sampled_from(FILE_FUNCS)).format(p=quoted)
    before = {str(p) for p in tmp.rglob("*")}
    hashes = digest([tmp, trace])
    r = invoke(
        ["sql", sql, trace, "--format", data.draw(st.sampled_from(["json", "csv", "table"]))]
    )
    assert "secret" not in r.output and "root:" not in r.output, sql
    assert {str(p) for p in tmp.rglob("*")} == before and digest([tmp, trace]) == hashes, sql
    if r.exit_code != 0:
        assert r.exit_code == 1 and len(r.stderr.splitlines()) == 1, (sql, r.output)


# --- options and catalogs -----------------------------------------------------------------------

hostile_number = (
    st.sampled_from(
        [
            "0",
            "-1",
            "nan",
            "inf",
            "-inf",
            "1e400",
            "1e-400",
            "9223372036854775808",
            "1e12",
            "0.5",
            "x",
            "",
            " 3",
        ]
    )
    | st.integers(-(2**70), 2**70).map(str)
    | st.floats().map(repr)
)

OPTION_CASES = [
    ("replay", ["--gpus", "--tp", "--ep", "--pp", "--decode-batch", "--interactivity", "--prefill-chunk-tokens", "--routing-skew"]),
    ("kv-curve", ["--gpus", "--block-size-tokens", "--hbm-kv-gb", "--dram-gb", "--ssd-tb", "--max-block-refs", "--capacities-gb"]),
    ("simulate", ["--gpus", "--max-batch", "--chunk-tokens", "--tpot-target-s", "--max-wait-s", "--sample-s", "--horizon-s", "--fill-gpus"]),
    ("plan", ["--pp", "--gpus-per-stage", "--headroom", "--context-tokens", "--kv-bytes-per-token", "--gpus", "--tp"]),
    ("synth", ["--sessions", "--calls", "--seed", "--rate-per-s", "--context-limit-tokens"]),
]  # fmt: skip


@FUZZ
@given(data=st.data())
def test_hostile_option_values(world, tmp_path_factory, data):
    _, trace = world
    tmp = tmp_path_factory.mktemp("opt")
    cmd, options = data.draw(st.sampled_from(OPTION_CASES))
    chosen = data.draw(st.lists(st.sampled_from(options), min_size=1, max_size=2, unique=True))
    argv = [cmd]
    if cmd in ("replay", "kv-curve", "simulate"):
        argv += [trace, "--hw", "gb200", "-q"]
    if cmd == "plan":
        argv += ["--model", "kimi-k2"]
    out = tmp / "o.parquet" if cmd == "synth" else tmp / "run"
    if cmd in ("synth", "simulate", "replay"):
        argv += ["-o", out]
    for o in chosen:
        argv += [o, data.draw(hostile_number)]
    if cmd in ("synth", "simulate") and "--sessions" not in chosen and "--calls" not in chosen:
        argv += ["--sessions", "2"] if cmd == "synth" else ["--horizon-s", "30"]
    assert_ok_or_refused([*argv, "--json"], inputs=[trace], output=out)


CATALOG_KEYS = {
    "systems": ["gpus_per_node", "scale_up_domain_gpus", "scale_up_bytes_per_s", "scale_out_bytes_per_s",
                "host_link_bytes_per_s", "host_dram_bytes", "host_dram_bytes_per_s", "ssd_bytes_per_s", "chip"],
    "models": ["num_layers", "hidden_size", "num_kv_heads", "total_params", "active_params",
               "n_routed_experts", "experts_per_token", "max_context_tokens", "attention"],
}  # fmt: skip
toml_value = st.sampled_from(
    [
        "0",
        "-1",
        "nan",
        "inf",
        "-inf",
        "1e308",
        "1e-300",
        "true",
        '"x"',
        "[]",
        "{}",
        "1.5",
        "3",
        '"gb200"',
    ]
)


@FUZZ
@given(data=st.data())
def test_hostile_catalog_entries(world, tmp_path_factory, data):
    _, trace = world
    tmp = tmp_path_factory.mktemp("cat")
    kind = data.draw(st.sampled_from(sorted(CATALOG_KEYS)))
    keys = data.draw(
        st.lists(st.sampled_from(CATALOG_KEYS[kind]), min_size=1, max_size=3, unique=True)
    )
    base = "gb200" if kind == "systems" else "kimi-k2"
    body = f'[{kind}.x]\nbase = "{base}"\n' + "".join(
        f"{k} = {data.draw(toml_value)}\n" for k in keys
    )
    cat = tmp / "c.toml"
    cat.write_text(body)
    sel = (
        ["--hw", "x", "--model", "kimi-k2"]
        if kind == "systems"
        else ["--hw", "gb200", "--model", "x"]
    )
    cmd = data.draw(
        st.sampled_from(
            [
                ["plan", *sel, "--json"],
                ["hw", "show", "gb200", "--json"],
                ["replay", trace, *sel, "--no-kv-tiers", "-q", "--json"],
            ]
        )
    )
    assert_ok_or_refused([*cmd, "--catalog", cat], inputs=[cat, trace])


# --- sweep scenarios ------------------------------------------------------------------------------

scenario_value = st.sampled_from(
    ['["gb200"]', '["gb200", "h200"]', "[]", "1", '"gb200"', "[1]", '["nope"]', "[8]", "[0]",
     "[-8]", "[8.5]", '["8"]', "[1e400]", '"kimi-k2"', "3", "nan", "inf", "{}", "true", '"fp8"', '"fp3"']
)  # fmt: skip
SCENARIO_KEYS = ["systems", "gpus", "model", "weight_precision", "kv_precision"]


@FUZZ
@given(data=st.data())
def test_hostile_scenarios(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("sc")
    keys = data.draw(st.lists(st.sampled_from(SCENARIO_KEYS), min_size=1, max_size=5, unique=True))
    body = "[scenario]\n" + "".join(f"{k} = {data.draw(scenario_value)}\n" for k in keys)
    if data.draw(st.booleans()):
        body += f"[checks]\nhbm_limit_bytes = {data.draw(scenario_value)}\n"
    sc = tmp / "sc.toml"
    sc.write_text(body)
    out = tmp / "sw"
    assert_ok_or_refused(["sweep", sc, "-o", out, "-q", "--json"], inputs=[sc], output=out)
