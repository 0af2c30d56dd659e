"""Canonical traces out, in the formats replay tools read.

* ``mooncake``: Mooncake FAST'25 JSONL, one request a line in arrival order:
  ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}`` with 512-token blocks,
  ``ceil(input_length / 512)`` ids whose value fixes the whole prefix (global scope), as read
  by AIPerf's and Dynamo's Mooncake trace loaders and kvcache-simulator.
* ``weka``: a folder of Weka/AgentX session files (kv-cache-tester ``traces/``), one
  ``<session>.json`` per session with 64-token local ``hash_ids`` (full blocks only),
  sub-agents nested as ``"type": "subagent"`` entries.

Block ids come from the trace's own ``block_hashes`` where their size fits (merged to 512 for
Mooncake: a merged block is named by its last block's id and position); otherwise they are
derived from the token counts (``agentx.traces.derive_blocks``). Session-scoped ids become
global ids by numbering (session, position, id) in order of first use; leading full blocks
inside the agent's smallest ``shared_prefix_tokens`` are named by (size, position) so every
session with the same tool and system prefix shares them (SEED-7).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from agentx.errors import InputError, UsageError
from agentx.io import write_text_atomic
from agentx.traces import schema as S
from agentx.traces.derive_blocks import derive_block_ids
from agentx.traces.io import Trace

MOONCAKE_BLOCK_TOKENS = 512
WEKA_BLOCK_TOKENS = 64
PARTIAL_BLOCK_ID_BASE = 1 << 63  # Weka file ids stay below (the reader's partial-block ids)
FORMATS = ("mooncake", "weka")


def export_trace(trace: Trace, fmt: str, out: Path | str) -> int:
    """Write ``trace`` in ``fmt`` to ``out`` (a file for mooncake, a new folder for weka)."""
    if fmt == "mooncake":
        return export_mooncake(trace, out)
    if fmt == "weka":
        return export_weka(trace, out)
    from agentx.errors import UnknownNameError

    raise UnknownNameError("export format", fmt, FORMATS)


def _block_ids(trace: Trace, size: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(offsets, ids, scope) of ``size``-token blocks for every row of the trace."""
    df = trace.calls
    b = df["block_size_tokens"]
    own = b.null_count() == 0 and b.n_unique() == 1 and df["block_hashes"].null_count() == 0
    if own and int(b[0]) == size:
        lists = df["block_hashes"]
        offsets = np.concatenate(([0], np.cumsum(lists.list.len().to_numpy()))).astype(np.int64)
        return (
            offsets,
            lists.explode(empty_as_null=False).to_numpy().astype(np.uint64),
            trace.hash_scope,
        )
    if own and size % int(b[0]) == 0:
        m = size // int(b[0])
        coarse = df.select(
            pl.col("block_hashes")
            .list.gather_every(m, offset=m - 1)
            .list.concat(
                pl.when(pl.col("block_hashes").list.len() % m != 0)
                .then(pl.col("block_hashes").list.slice(-1, 1))
                .otherwise(pl.lit([], dtype=pl.List(pl.UInt64)))
            )
        ).to_series()
        offsets = np.concatenate(([0], np.cumsum(coarse.list.len().to_numpy()))).astype(np.int64)
        return (
            offsets,
            coarse.explode(empty_as_null=False).to_numpy().astype(np.uint64),
            trace.hash_scope,
        )
    offsets, ids = derive_block_ids(df, size)
    return offsets, ids, "session"


def export_mooncake(trace: Trace, out: Path | str) -> int:
    df = trace.calls
    offsets, ids, scope = _block_ids(trace, MOONCAKE_BLOCK_TOKENS)
    lens = np.diff(offsets)
    if scope != "global":
        ids = _global_ids(df, offsets, ids)
    tie = df["source_line"] if "source_line" in df.columns else pl.Series(np.zeros(df.height))
    order = np.lexsort((tie.to_numpy(), df["t_start_s"].to_numpy()))
    t_ms = np.rint(df["t_start_s"].to_numpy() * 1000.0).astype(np.int64)
    n_in = df["input_tokens"].to_numpy()
    n_out = df["output_tokens"].to_numpy()
    lines = []
    for k in order.tolist():
        o = int(offsets[k])
        rec = {
            "timestamp": int(t_ms[k]),
            "input_length": int(n_in[k]),
            "output_length": int(n_out[k]),
            "hash_ids": ids[o : o + int(lens[k])].tolist(),  # per row: no 83 M-int list
        }
        lines.append(json.dumps(rec))
    _write_file(out, "".join(line + "\n" for line in lines))
    return len(lines)


def _global_ids(df: pl.DataFrame, offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Session-scoped ids -> one global numbering, by first use in arrival order."""
    lens = np.diff(offsets)
    row = np.repeat(np.arange(df.height), lens)
    pos = np.arange(len(ids)) - np.repeat(offsets[:-1], lens)
    # one shared size per agent of a session (its smallest), so an agent's blocks are named
    # alike in every call (as agentx.kv.blocks does)
    spt = (
        df.select(pl.col("shared_prefix_tokens").min().over("session_id", "agent_id"))
        .to_series()
        .to_numpy()[row]
    )
    shared = (pos + 1) * MOONCAKE_BLOCK_TOKENS <= spt
    session = df["session_id"].rank("dense").cast(pl.Int64).to_numpy()[row]
    keys = pl.DataFrame(
        {
            "s": np.where(shared, -1, session),
            "p": pos,
            "v": np.where(shared, spt.astype(np.uint64), ids),
            "t": df["t_start_s"].to_numpy()[row],
            "i": np.arange(len(ids)),
        }
    )
    first = (
        keys.sort("t", "i")
        .with_row_index("_k")
        .group_by("s", "p", "v")
        .agg(pl.col("_k").min())
        .sort("_k")
        .with_row_index("g")
    )
    joined = keys.join(first.select("s", "p", "v", "g"), on=["s", "p", "v"], how="left")
    return joined.sort("i")["g"].to_numpy().astype(np.uint64)


def export_weka(trace: Trace, out: Path | str) -> int:
    out = Path(out)
    if out.exists():
        raise UsageError(f"'{out}' exists; weka export writes a new folder, choose another -o")
    df = trace.calls.with_row_index("_gidx")
    offsets, ids, _ = _block_ids(trace, WEKA_BLOCK_TOKENS)  # global ids are valid local ones
    offset_s = _session_offsets(trace)
    names: set[str] = set()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=str(out.parent)))
    except OSError as exc:
        raise InputError(out, f"cannot write here ({exc.strerror or exc})") from None
    try:  # one session in memory at a time; the folder appears whole or not at all
        for sdf in df.partition_by("session_id", maintain_order=True):
            sid = sdf["session_id"][0]
            doc = _session_doc(sdf, sid, offset_s.get(sid), offsets, ids)
            (tmp / f"{_file_name(sid, names)}.json").write_text(json.dumps(doc) + "\n")
        os.chmod(tmp, 0o777 & ~_umask())
        os.rename(tmp, out)
    except OSError as exc:
        raise InputError(out, f"cannot write here ({exc.strerror or exc})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return len(names)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _file_name(sid: str, taken: set[str]) -> str:
    """A safe, unused file name for a session id (ids may hold any character)."""
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in sid).lstrip(".") or "s"
    base, k = name, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _session_offsets(trace: Trace) -> dict[str, float]:
    """Session start times a Weka import placed them at (so the files' own ``t`` come back)."""
    try:
        opts = json.loads(trace.meta.get(S.META_OPTIONS, "{}"))
    except json.JSONDecodeError:
        opts = {}
    if trace.source != "weka" or opts.get("arrival") != "poisson":
        return {}
    from agentx.traces.importers.weka import session_offsets_s

    names = sorted(trace.calls["session_id"].unique().to_list())
    t = session_offsets_s(len(names), float(opts["session_rate_per_s"]), int(opts["seed"]))
    return dict(zip(names, t.tolist(), strict=True))


def _session_doc(sdf, sid: str, offset: float | None, offsets, ids: np.ndarray) -> dict:
    rows = sdf.to_dicts()
    base = offset if offset is not None else min(r["t_start_s"] for r in rows)
    top: list[dict] = []
    subs: dict[str, dict] = {}
    sums = {"parent": [0, 0], "sub": [0, 0]}
    for r in rows:
        k = r["_gidx"]
        t = r["t_start_s"] - base
        n_in = r["input_tokens"]
        o = int(offsets[k])
        full = n_in // WEKA_BLOCK_TOKENS
        hashes = ids[o : o + full].tolist()
        req = {"t": t, "type": "n", "model": r["model"], "in": n_in, "out": r["output_tokens"]}
        req["hash_ids"] = hashes
        req["input_types"] = {"user": ["text"], "tool_result": ["tool_result"]}.get(
            r["trigger"], []
        )
        if r["think_time_s"] is not None:
            req["think_time"] = r["think_time_s"]
        if r.get("api_time_s") is not None:
            req["api_time"] = r["api_time_s"]
        agent = r["agent_id"]
        if agent is None:
            top.append(req)
            sums["parent"][0] += n_in
            sums["parent"][1] += r["output_tokens"]
            continue
        sums["sub"][0] += n_in
        sums["sub"][1] += r["output_tokens"]
        entry = subs.get(agent)
        if entry is None:
            entry = {"t": t, "type": "subagent", "agent_id": agent, "models": [], "requests": []}
            entry.update(tool_tokens=0, system_tokens=0)
            subs[agent] = entry
            top.append(entry)
        req["t"] = t - entry["t"]
        entry["requests"].append(req)
        entry["tool_tokens"] = max(entry["tool_tokens"], r["shared_prefix_tokens"])
        if r["model"] and r["model"] not in entry["models"]:
            entry["models"].append(r["model"])
    _local_ids(top)
    models = sorted({r["model"] for r in rows if r["model"]})
    main_prefix = max((r["shared_prefix_tokens"] for r in rows if r["agent_id"] is None), default=0)
    return {
        "id": sid,
        "models": models,
        "block_size": WEKA_BLOCK_TOKENS,
        "hash_id_scope": "local",
        "tool_tokens": main_prefix,
        "system_tokens": 0,
        "requests": top,
        "totals": {
            "parent_tokens": {"input": sums["parent"][0], "output": sums["parent"][1]},
            "subagent_tokens": {"input": sums["sub"][0], "output": sums["sub"][1]},
            "combined_tokens": {
                "input": sums["parent"][0] + sums["sub"][0],
                "output": sums["parent"][1] + sums["sub"][1],
            },
            "subagent_count": len(subs),
        },
    }


def _local_ids(requests: list[dict]) -> None:
    """Renumber a session's ids in order of first use when any is too big for a Weka file."""
    flat = [r for e in requests for r in e.get("requests", [e])]
    if all(h < PARTIAL_BLOCK_ID_BASE for r in flat for h in r["hash_ids"]):
        return
    new: dict[int, int] = {}
    for r in flat:
        r["hash_ids"] = [new.setdefault(h, len(new)) for h in r["hash_ids"]]


def _write_file(out: Path | str, text: str) -> None:
    try:
        write_text_atomic(out, text)
    except OSError as exc:
        raise InputError(out, f"cannot write here ({exc.strerror or exc})") from None
