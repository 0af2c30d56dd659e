"""Files in and out: atomic writes, guarded reads, fingerprints.

Outputs are written to a temporary file in the destination folder and renamed into place,
so a failed run never leaves a partial file and never replaces an input.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from agentx.errors import InputError, UsageError


def ensure_distinct(output: os.PathLike | str, inputs: Iterable[os.PathLike | str]) -> None:
    """Refuse to write an output onto one of the inputs (nothing the user brought is lost)."""
    out = Path(output).resolve()
    for inp in inputs:
        p = Path(inp).resolve()
        if out == p or (p.is_dir() and p in out.parents and out.suffix == ""):
            raise UsageError(f"output path '{output}' is the input '{inp}'; choose another -o")


@contextlib.contextmanager
def atomic_path(path: os.PathLike | str, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=str(dest.parent)
    )
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; outputs should get the permissions of any newly created file.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: os.PathLike | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: os.PathLike | str, obj: object) -> None:
    """Deterministic JSON (sorted keys, fixed indent) so equal inputs give equal bytes."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: object) -> object:
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_parquet_atomic(
    df: pl.DataFrame,
    path: os.PathLike | str,
    metadata: dict[str, str] | None = None,
    *,
    compression: str = "zstd",
) -> None:
    """Write ``df`` with key-value ``metadata`` atomically; byte-identical for equal input."""
    table = df.to_arrow()
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path, suffix=".parquet.tmp") as tmp:
        pq.write_table(
            table,
            tmp,
            compression=compression,
            row_group_size=1 << 20,
            write_statistics=True,
        )


def read_parquet_checked(path: os.PathLike | str) -> tuple[pl.DataFrame, dict[str, str]]:
    """Read a Parquet file and its key-value metadata, turning damage into one clear line."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file")
    if p.is_dir():
        raise InputError(p, "is a folder, expected a Parquet file")
    try:
        pf = pq.ParquetFile(p)
        table = pf.read()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(p, f"not a readable Parquet file ({first})") from None
    raw = table.schema.metadata or {}
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
    meta.pop("ARROW:schema", None)
    return pl.from_arrow(table), meta


def file_fingerprint(path: os.PathLike | str) -> str:
    """SHA-256 of a file's bytes, for run manifests."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
