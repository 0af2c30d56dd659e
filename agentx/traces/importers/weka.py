"""Weka / AgentX Claude Code sessions (kv-cache-tester format): one JSON file per session.

Block ids are parsed without making a Python object per id: the ``hash_ids`` arrays are cut out
of the raw bytes by a regular expression, replaced by a marker, and their digits are read in
one ``np.fromstring`` call per file; ``json`` only sees the slim remainder (5x faster).
Every id array is still checked for digits and commas only, and anything unusual falls back to
plain ``json`` with a precise message. The files list only *full* 64-token blocks
(``floor(in/64)`` ids); the importer appends one never-shared id for the trailing partial
block so every row carries ``ceil(in/64)`` ids as schema v1 requires.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from agentx.errors import InputError, UsageError
from agentx.progress import progress
from agentx.traces.importers._common import (
    count,
    finish,
    leading_seen_blocks,
    parse_json,
    read_bytes,
    seconds,
)
from agentx.traces.io import Trace, trace_metadata

BLOCK_SIZE_TOKENS = 64
DEFAULT_SESSION_RATE_PER_S = 1 / 6  # one session every 6 s: 603 sessions over about an hour
PARTIAL_BLOCK_ID_BASE = 1 << 63  # + the call's position in its file; never equal to a source id
_ID_CHARS = b"0123456789, \n\t\r"
_MARK = "@@agentx-hash-"


def session_files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise InputError(source, "no such file or folder")
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        raise InputError(source, "no Weka session files (*.json or *.json.gz) in this folder")
    return files


def session_offsets_s(n: int, session_rate_per_s: float, seed: int) -> np.ndarray:
    """Session start times: a Poisson process (exponential gaps), the first session at 0."""
    gaps = np.random.default_rng(seed).exponential(1.0 / session_rate_per_s, size=n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if n else gaps


class _Session:
    """Calls of one file in file order (sub-agent calls where their parent entry stands)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cols: dict[str, list] = {
            k: []
            for k in (
                "agent_id",
                "t",
                "input_tokens",
                "output_tokens",
                "think_time_s",
                "api_time_s",
                "model",
                "trigger",
                "shared_prefix_tokens",
                "n_ids",
            )
        }
        self.parts: list[bytes] = []
        self.where: list[str] = []
        self.sums = {"parent": [0, 0], "subagent": [0, 0]}
        self.block_size = BLOCK_SIZE_TOKENS

    def walk(
        self,
        requests: object,
        parts: list[bytes] | None,
        t0: float,
        agent: str | None,
        prefix: int,
        label: str,
    ) -> None:
        if not isinstance(requests, list):
            raise InputError(
                self.path, "expected a list of requests", where=label or None, field="requests"
            )
        prev_t = 0.0
        for i, r in enumerate(requests):
            where = f"{label}request {i}"
            if not isinstance(r, dict):
                raise InputError(self.path, f"expected an object, got {r!r:.40}", where=where)
            t = seconds(r.get("t"), self.path, where, "t")
            if t < prev_t:
                raise InputError(
                    self.path,
                    f"expected times sorted within the agent's requests, got {t} after {prev_t}",
                    where=where,
                    field="t",
                )
            prev_t = t
            if r.get("type") == "subagent":
                self._subagent(r, parts, t0 + t, where)
                continue
            n_in = count(r.get("in"), self.path, where, "in")
            n_out = count(r.get("out"), self.path, where, "out")
            n_ids = self._ids(r.get("hash_ids"), parts, where)
            full = n_in // self.block_size
            if n_ids not in (full, -(-n_in // self.block_size)):
                raise InputError(
                    self.path,
                    f"expected floor(in/{self.block_size}) = {full} block ids for {n_in} tokens, got {n_ids}",
                    where=where,
                    field="hash_ids",
                )
            types = r.get("input_types") or []
            if not isinstance(types, list):
                raise InputError(
                    self.path,
                    f"expected a list of strings, got {types!r:.40}",
                    where=where,
                    field="input_types",
                )
            model = r.get("model")
            if model is not None and not isinstance(model, str):
                raise InputError(
                    self.path,
                    f"expected a model name, got {model!r:.40}",
                    where=where,
                    field="model",
                )
            c = self.cols
            c["agent_id"].append(agent)
            c["t"].append(t0 + t)
            c["input_tokens"].append(n_in)
            c["output_tokens"].append(n_out)
            c["think_time_s"].append(
                seconds(r.get("think_time"), self.path, where, "think_time", optional=True)
            )
            c["api_time_s"].append(
                seconds(r.get("api_time"), self.path, where, "api_time", optional=True)
            )
            c["model"].append(model)
            c["trigger"].append(
                "subagent"
                if agent is not None and i == 0
                else "user"
                if "text" in types
                else "tool_result"
                if "tool_result" in types
                else "unknown"
            )
            c["shared_prefix_tokens"].append(min(prefix, n_in))
            c["n_ids"].append(n_ids)
            s = self.sums["parent" if agent is None else "subagent"]
            s[0] += n_in
            s[1] += n_out

    def _subagent(self, r: dict, parts: list[bytes] | None, t0: float, where: str) -> None:
        agent = r.get("agent_id")
        if not isinstance(agent, str) or not agent:
            raise InputError(
                self.path,
                f"expected a sub-agent id, got {agent!r:.40}",
                where=where,
                field="agent_id",
            )
        prefix = count(r.get("tool_tokens"), self.path, where, "tool_tokens") + count(
            r.get("system_tokens"), self.path, where, "system_tokens"
        )
        self.walk(r.get("requests"), parts, t0, agent, prefix, f"{where} (sub-agent '{agent}') ")

    def _ids(self, h: object, parts: list[bytes] | None, where: str) -> int:
        if isinstance(h, str) and parts is not None and h.startswith(_MARK):
            body = parts[int(h[len(_MARK) :])]
            if not body.translate(None, _ID_CHARS):
                self.parts.append(body)
                self.where.append(where)
                return body.count(b",") + 1 if body.strip() else 0
            h = parse_json(self.path, b"[" + body + b"]", where)
        if not isinstance(h, list):
            raise InputError(
                self.path,
                f"expected a list of block ids, got {h!r:.40}",
                where=where,
                field="hash_ids",
            )
        _check_ids(h, self.path, where)
        self.parts.append(",".join(map(str, h)).encode())
        self.where.append(where)
        return len(h)

    def ids(self) -> np.ndarray:
        """All block ids of the file in one parse; a damaged list is found and named."""
        body = b",".join(p for p in self.parts if p.strip())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                ids = (
                    np.fromstring(body.decode("ascii"), dtype=np.uint64, sep=",")
                    if body
                    else np.zeros(0, np.uint64)
                )
            except (ValueError, DeprecationWarning):
                ids = None
        if (
            ids is None
            or len(ids) != sum(self.cols["n_ids"])
            or (len(ids) and ids.max() >= PARTIAL_BLOCK_ID_BASE)
        ):
            for part, where in zip(self.parts, self.where, strict=True):
                _check_ids(parse_json(self.path, b"[" + part + b"]", where), self.path, where)
            raise InputError(self.path, "expected comma-separated block ids", field="hash_ids")
        return ids


def _check_ids(h: object, path: Path, where: str) -> None:
    if not isinstance(h, list):
        raise InputError(
            path, f"expected a list of block ids, got {h!r:.40}", where=where, field="hash_ids"
        )
    for k, x in enumerate(h):
        if type(x) is not int or not 0 <= x < PARTIAL_BLOCK_ID_BASE:
            raise InputError(
                path,
                f"expected non-negative integer block ids below 2^63, element {k} is {x!r:.40}",
                where=where,
                field="hash_ids",
            )


def _cut_hash_lists(raw: bytes) -> tuple[bytes, list[bytes] | None]:
    """Replace each ``"hash_ids": [...]`` by a marker string; return the slim text and the lists."""
    if _MARK.encode() in raw:
        return raw, None
    out, parts, pos = [], [], 0
    key = b'"hash_ids"'
    while (i := raw.find(key, pos)) >= 0:
        j = i + len(key)
        while raw[j : j + 1] in (b" ", b"\n", b"\t", b"\r"):
            j += 1
        if raw[j : j + 1] != b":":
            out.append(raw[pos:j])
            pos = j
            continue
        j += 1
        while raw[j : j + 1] in (b" ", b"\n", b"\t", b"\r"):
            j += 1
        k = raw.find(b"]", j)
        if raw[j : j + 1] != b"[" or k < 0 or raw.find(b"[", j + 1, k) >= 0:
            out.append(raw[pos:j])
            pos = j
            continue
        parts.append(raw[j + 1 : k])
        out.append(raw[pos:i])
        out.append(b'"hash_ids": "%s%d"' % (_MARK.encode(), len(parts) - 1))
        pos = k + 1
    out.append(raw[pos:])
    return b"".join(out), parts


def _read_session(path: Path) -> tuple[_Session, np.ndarray]:
    raw = read_bytes(path)
    text, parts = _cut_hash_lists(raw)
    try:
        doc = parse_json(path, text)
    except InputError:
        doc, parts = parse_json(path, raw), None  # the cut made it unreadable: judge the original
    if not isinstance(doc, dict):
        raise InputError(path, "expected a JSON object (one Weka session)")
    s = _Session(path)
    size = doc.get("block_size", BLOCK_SIZE_TOKENS)
    if size != BLOCK_SIZE_TOKENS:
        raise InputError(
            path, f"expected {BLOCK_SIZE_TOKENS}-token blocks, got {size!r:.40}", field="block_size"
        )
    if doc.get("hash_id_scope", "local") != "local":
        raise InputError(
            path, f"expected 'local', got {doc.get('hash_id_scope')!r:.40}", field="hash_id_scope"
        )
    prefix = count(doc.get("tool_tokens"), path, None, "tool_tokens") + count(
        doc.get("system_tokens"), path, None, "system_tokens"
    )
    s.walk(doc.get("requests"), parts, 0.0, None, prefix, "")
    _check_totals(s, doc.get("totals"))
    return s, s.ids()


def _check_totals(s: _Session, totals: object) -> None:
    """The file's own sums must equal the calls read: nothing dropped, nothing doubled."""
    if totals is None:
        return
    for key, who in (("parent_tokens", "parent"), ("subagent_tokens", "subagent")):
        got = totals.get(key) if isinstance(totals, dict) else None
        want = s.sums[who]
        if not isinstance(got, dict) or [got.get("input"), got.get("output")] != want:
            raise InputError(
                s.path,
                f"expected {{'input': {want[0]}, 'output': {want[1]}}} (the sum of its requests), got {got!r:.80}",
                field=f"totals.{key}",
            )


def load_weka(
    source: Path | str,
    *,
    session_rate_per_s: float = DEFAULT_SESSION_RATE_PER_S,
    seed: int = 0,
    progress_bar: bool | None = None,
) -> Trace:
    """Read a folder (or one file) of Weka sessions into a validated trace."""
    source = Path(source)
    if not (
        isinstance(session_rate_per_s, (int, float))
        and math.isfinite(session_rate_per_s)
        and session_rate_per_s > 0
    ):
        raise UsageError(
            f"session rate must be a positive number of sessions per second, got {session_rate_per_s}"
        )
    files = session_files(source)
    offsets_s = session_offsets_s(len(files), float(session_rate_per_s), int(seed))
    cols: dict[str, list] = {}
    values, lens = [], []
    for code, path in enumerate(progress(files, label="weka", enabled=progress_bar)):
        s, ids = _read_session(path)
        order, reused, session_values, session_lens = _blocks(s, ids)
        stem = path.name.removesuffix(".gz").removesuffix(".json")
        s.cols.update(
            session_id=[stem] * len(order),
            t_start_s=[t + offsets_s[code] for t in s.cols["t"]],
            reused_prefix_tokens=reused.tolist(),
        )
        identity = bool((order == np.arange(len(order))).all())
        for k, v in s.cols.items():
            cols.setdefault(k, []).extend(v if identity else [v[i] for i in order])
        values.append(session_values)
        lens.append(session_lens)
    n_ids = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    offsets = pa.array(np.concatenate(([0], np.cumsum(n_ids))), pa.int64())
    blocks = pa.LargeListArray.from_arrays(offsets, pa.array(np.concatenate(values), pa.uint64()))
    df = pl.DataFrame(cols, schema_overrides=_OVERRIDES).with_columns(
        pl.Series("block_hashes", blocks),
        pl.int_range(pl.len()).over("session_id").alias("call_index"),
        pl.lit(BLOCK_SIZE_TOKENS).alias("block_size_tokens"),
        pl.lit("weka").alias("source"),
    )
    return finish(df.drop("t", "n_ids"), _meta(session_rate_per_s, seed), source)


_OVERRIDES = {
    "agent_id": pl.String,
    "model": pl.String,
    "t": pl.Float64,
    "t_start_s": pl.Float64,
    "think_time_s": pl.Float64,
    "api_time_s": pl.Float64,
}


def _blocks(s: _Session, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One session, small arrays: call order by time, reused prefixes, ids in call order.

    Done per session so the arrays stay in cache; the walk shares one seen-set between the
    main agent and its sub-agents, in call order (SOURCES.md §6).
    """
    t = np.asarray(s.cols["t"], dtype=np.float64)
    n = len(t)
    order = np.lexsort((np.arange(n), t))  # stable: ties keep file order
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    n_ids = np.asarray(s.cols["n_ids"], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(n_ids)))
    lead = leading_seen_blocks(np.zeros(n, np.int64), rank, offsets, ids)
    n_in = np.asarray(s.cols["input_tokens"], dtype=np.int64)
    reused = np.minimum(lead * BLOCK_SIZE_TOKENS, n_in)  # file order, like s.cols
    # the trailing partial block is never shared: give it an id no source id can equal
    add = (((n_in % BLOCK_SIZE_TOKENS) != 0) & (n_ids == n_in // BLOCK_SIZE_TOKENS))[order]
    n_sorted = n_ids[order]
    lens = n_sorted + add
    new_offsets = np.concatenate(([0], np.cumsum(lens)))
    out = np.empty(int(new_offsets[-1]), dtype=np.uint64)
    out[_segment_positions(new_offsets[:-1], n_sorted)] = ids[
        _segment_positions(offsets[:-1][order], n_sorted)
    ]
    out[new_offsets[1:][add] - 1] = np.uint64(PARTIAL_BLOCK_ID_BASE) + np.flatnonzero(add).astype(
        np.uint64
    )
    return order, reused, out, lens


def _segment_positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ranges starts[i] .. starts[i] + lens[i] - 1."""
    total = int(lens.sum())
    shift = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return np.arange(total, dtype=np.int64) + shift


def _meta(session_rate_per_s: float, seed: int) -> dict[str, str]:
    options = {
        "arrival": "poisson",
        "session_rate_per_s": float(session_rate_per_s),
        "seed": int(seed),
        "session_order": "file name",
    }
    return trace_metadata(
        "weka", block_size_tokens=BLOCK_SIZE_TOKENS, hash_scope="session", options=options
    )
