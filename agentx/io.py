"""Files in and out: whole-output atomic writes, the output-path guard, strict JSON, guarded reads.

Every output (one file or a whole run folder) is first written to a temporary sibling named
``.<name>.agentx-tmp-<pid>`` and renamed into place in one step, so a failed or killed command
never leaves a partial output; an older output is replaced only once the new one is complete
(old renamed aside to ``.<name>.agentx-old-<pid>``, new renamed in, old deleted). Siblings of
that naming left by a killed process are removed by the next command writing the same path.
Before anything is written, ``check_output`` refuses an output that is, holds, or lies inside
an input, so nothing the user brought is ever overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from agentx.errors import AgentxError, InputError, UsageError, one_line

TMP_TAG = ".agentx-tmp-"
OLD_TAG = ".agentx-old-"

PathLike = os.PathLike | str


class OutputError(UsageError):
    """An output path that must not be written: it is, holds or lies in an input (exit 2)."""


class UnwritableError(AgentxError):
    """An output path the system does not let us write (exit 1, like an unreadable input)."""

    def __init__(self, path: PathLike, exc: BaseException | str) -> None:
        why = exc if isinstance(exc, str) else _why(exc)
        super().__init__(f"{one_line(path)}: cannot write here ({why})")


def _resolve(p: PathLike) -> Path:
    try:
        return Path(p).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop in the path
        raise OutputError(f"cannot resolve path '{one_line(p)}' ({_why(exc)})") from None


def _resolve_input(p: PathLike) -> Path:
    try:
        return Path(p).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise InputError(p, f"cannot resolve the path ({_why(exc)})") from None


def _why(exc: BaseException) -> str:
    return one_line(getattr(exc, "strerror", None) or exc or type(exc).__name__)


def check_output(
    output: PathLike, inputs: Iterable[PathLike | None] = (), *, inside_ok: bool = False
) -> Path:
    """Refuse (exit 2) an output that is, holds or lies inside an input; return it resolved.

    Compared after resolving symlinks, and by inode for hard links. A folder output holding an
    input would delete it when the new run replaces the folder; an output inside an input
    folder would write into what the user brought (``inside_ok``: a new file there, such as a
    report beside the run it shows, is fine; an input file is still never replaced).
    """
    if str(output).strip() == "":
        raise OutputError("-o is empty; give a path to write")
    out = _resolve(output)
    shown = one_line(output)
    given = [(one_line(i), _resolve_input(i)) for i in inputs if i is not None and str(i) != ""]
    for what, p in given:  # the plainest mistake first, whatever the order of the inputs
        if out == p or _same_file(out, p):
            raise OutputError(f"output path '{shown}' is the input '{what}'; choose another -o")
    for what, p in given:
        if p in out.parents and p.is_dir() and not inside_ok:
            raise OutputError(
                f"output path '{shown}' lies inside the input folder '{what}'; choose another -o"
            )
        if out in p.parents:
            raise OutputError(
                f"output path '{shown}' holds the input '{what}' and would overwrite it; "
                "choose another -o"
            )
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's live process, or not a pid: leave it alone
    return True


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def clean_stale(dest: Path) -> list[Path]:
    """Remove temporary siblings of ``dest`` left by a killed agentx; return what was removed.

    A run killed between renaming the old output aside and the new one in leaves ``dest``
    absent and the old one aside: it is put back, as the last complete output.
    """
    removed: list[Path] = []
    try:
        siblings = list(dest.parent.iterdir())
    except OSError:
        return removed
    for tag in (OLD_TAG, TMP_TAG):  # old first: it may be restored
        prefix = f".{dest.name}{tag}"
        for p in siblings:
            if not p.name.startswith(prefix) or not p.name[len(prefix) :].isdigit():
                continue
            if _pid_alive(int(p.name[len(prefix) :])):
                continue
            if tag == OLD_TAG and not os.path.lexists(dest):
                with contextlib.suppress(OSError):
                    os.rename(p, dest)
                    continue
            _remove(p)
            removed.append(p)
    return removed


def _tmp_sibling(dest: Path, tag: str = TMP_TAG) -> Path:
    return dest.parent / f".{dest.name}{tag}{os.getpid()}"


def _prepare(output: PathLike, inputs: Iterable[PathLike | None]) -> Path:
    dest = check_output(output, inputs)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnwritableError(output, exc) from None
    if not dest.parent.is_dir():
        raise UnwritableError(output, "its parent is not a folder")
    clean_stale(dest)
    return dest


def _swap_in(tmp: Path, dest: Path) -> None:
    """Rename ``tmp`` onto ``dest``; an existing ``dest`` is removed only after ``tmp`` is in."""
    old = None
    if os.path.lexists(dest) and (tmp.is_dir() or dest.is_dir()):
        old = _tmp_sibling(dest, OLD_TAG)
        _remove(old)
        os.rename(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError:
        if old is not None:
            os.rename(old, dest)
        raise
    if old is not None:
        _remove(old)
    _fsync_dir(dest.parent)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


RUN_FILES_SUFFIXES = (".parquet", ".json")


def _check_replaceable_dir(dest: Path, output: PathLike) -> None:
    """A folder output may replace only nothing, an empty folder, or an agentx run folder."""
    if not os.path.lexists(dest):
        return
    shown = one_line(output)
    if not dest.is_dir() or dest.is_symlink():
        raise OutputError(f"-o '{shown}' exists and is not a folder; a run is written as a folder")
    try:
        entries = list(dest.iterdir())
    except OSError as exc:
        raise OutputError(f"cannot read the folder '{shown}' ({_why(exc)})") from None
    if not entries:
        return
    ours = (dest / "run.json").is_file() and all(
        e.is_file() and not e.is_symlink() and e.name.endswith(RUN_FILES_SUFFIXES) for e in entries
    )
    if not ours:
        raise OutputError(
            f"-o '{shown}' is a folder holding files that are not one agentx run; "
            "give a new or empty folder, or an earlier run to replace"
        )


@contextlib.contextmanager
def atomic_dir(output: PathLike, inputs: Iterable[PathLike | None] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces ``output`` in one rename.

    On any error (or a kill) nothing appears at ``output`` and an earlier run there stays
    whole. ``inputs`` are checked with :func:`check_output` first.
    """
    dest = _prepare(output, inputs)
    _check_replaceable_dir(dest, output)
    with _staged(dest, output, Path.mkdir) as tmp:
        yield tmp


@contextlib.contextmanager
def atomic_path(
    path: PathLike, suffix: str | None = None, inputs: Iterable[PathLike | None] = ()
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    del suffix  # one naming for every temporary: the next run can recognise and remove it
    dest = _prepare(path, inputs)
    if dest.is_dir():
        raise OutputError(f"-o '{one_line(path)}' is a folder; give a file name")
    # outputs get the permissions of any newly created file (umask), not mkstemp's 0600
    with _staged(dest, path, Path.touch) as tmp:
        yield tmp


@contextlib.contextmanager
def _staged(dest: Path, shown: PathLike, create) -> Iterator[Path]:
    """The one staging step of every output: ``create`` a temporary sibling of ``dest``, yield
    it, swap it in on success; the temporary never survives, and an OSError is one line."""
    tmp = _tmp_sibling(dest)
    _remove(tmp)
    try:
        create(tmp)
    except OSError as exc:
        raise UnwritableError(shown, exc) from None
    try:
        yield tmp
        _swap_in(tmp, dest)
    except OSError as exc:
        raise UnwritableError(shown, exc) from None
    finally:
        _remove(tmp)


def write_text_atomic(path: PathLike, text: str, inputs: Iterable[PathLike | None] = ()) -> None:
    with atomic_path(path, inputs=inputs) as tmp:
        tmp.write_text(text, encoding="utf-8")


def strict_json(obj: object) -> object:
    """``obj`` with every NaN and ±inf replaced by null, numpy scalars as Python numbers.

    JSON has no NaN or Infinity (RFC 8259); jq, JavaScript and Go refuse them. A value that is
    undefined or unbounded is null in every JSON agentx writes.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return strict_json(obj.item())
    if hasattr(obj, "tolist"):  # numpy arrays
        return strict_json(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset)):
        return strict_json(sorted(obj, key=str))
    return str(obj)


def dumps_json(obj: object, *, indent: int | None = 2) -> str:
    """The one JSON encoder: strict (no NaN/Infinity), sorted keys, deterministic bytes."""
    return json.dumps(strict_json(obj), indent=indent, sort_keys=True, allow_nan=False)


def write_json_atomic(path: PathLike, obj: object) -> None:
    """Deterministic strict JSON (sorted keys, fixed indent) so equal inputs give equal bytes."""
    write_text_atomic(path, dumps_json(obj) + "\n")


def ensure_distinct(
    output: PathLike, inputs: Iterable[PathLike | None], *, inside_ok: bool = False
) -> None:
    """Refuse to write an output onto, into or around one of the inputs (see check_output)."""
    check_output(output, inputs, inside_ok=inside_ok)


def write_parquet_atomic(
    df: pl.DataFrame,
    path: PathLike,
    metadata: dict[str, str] | None = None,
    *,
    compression: str = "zstd",
    inputs: Iterable[PathLike | None] = (),
) -> None:
    """Write ``df`` with key-value ``metadata`` atomically; byte-identical for equal input."""
    table = df.to_arrow()
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path, inputs=inputs) as tmp:
        write_parquet_file(table, tmp)


ROW_GROUP_ROWS = 1 << 20


def write_parquet_file(table: pa.Table, path: Path) -> None:
    """The one Parquet layout agentx writes (inside an atomic file or run folder)."""
    try:
        pq.write_table(
            table, path, compression="zstd", row_group_size=ROW_GROUP_ROWS, write_statistics=True
        )
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise UsageError(f"cannot write Parquet: {one_line(exc)}") from None


class ParquetAppender:
    """:func:`write_parquet_file`'s layout written piece by piece: tables with one schema
    appended as row groups, so a file bigger than memory streams out. One table appended
    gives the same bytes as ``write_parquet_file``; the file is opened on the first append
    (or, for none, at close with ``schema``)."""

    def __init__(self, path: Path, schema: pa.Schema | None = None) -> None:
        self.path, self.schema, self._w = path, schema, None

    def append(self, table: pa.Table) -> None:
        if self._w is None:
            self.schema = table.schema
            self._w = pq.ParquetWriter(
                self.path, table.schema, compression="zstd", write_statistics=True
            )
        elif table.schema != self.schema:
            table = table.cast(self.schema)  # metadata and nullability as the first piece
        self._w.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def close(self) -> None:
        if self._w is None:
            if self.schema is None:
                raise UsageError("cannot write Parquet: no table and no schema")
            self.append(self.schema.empty_table())
        self._w.close()


def regular_file(path: PathLike, what: str = "file") -> Path:
    """``path`` if it is a regular file; a FIFO, device or socket would block or never end."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except OSError as exc:
        raise InputError(p, f"cannot read ({_why(exc)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(p, f"is a folder, expected a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(p, f"is not a regular file (a pipe, device or socket), expected a {what}")
    return p


def decode_metadata(raw: dict[bytes, bytes] | None) -> dict[str, str]:
    """Parquet key-value metadata as text; undecodable bytes become U+FFFD, never a crash."""
    meta = {
        k.decode("utf-8", errors="replace"): v.decode("utf-8", errors="replace")
        for k, v in (raw or {}).items()
    }
    meta.pop("ARROW:schema", None)
    return meta


def read_parquet_checked(path: PathLike) -> tuple[pl.DataFrame, dict[str, str]]:
    """Read a Parquet file and its key-value metadata, turning damage into one clear line."""
    p = regular_file(path, "Parquet file")
    try:
        table = pq.ParquetFile(p).read()
    except pa.ArrowMemoryError:
        raise InputError(
            p, "not enough memory to read it; free memory or use a smaller trace"
        ) from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(p, f"not a readable Parquet file ({one_line(exc)})") from None
    meta = decode_metadata(table.schema.metadata)
    # polars reads Arrow metadata as UTF-8 (and panics on anything else): it gets none
    table = table.replace_schema_metadata(None)
    try:
        df = pl.from_arrow(table)
    except Exception as exc:  # an Arrow type polars cannot hold: name it, no panic
        raise InputError(p, f"holds a column type agentx cannot read ({one_line(exc)})") from None
    return df, meta


def file_fingerprint(path: PathLike) -> str:
    """SHA-256 of a file's bytes, for run manifests (one started by ``prefetch_fingerprint``
    for the same unchanged file is taken instead)."""
    key = _stat_key(path)
    pending = _FINGERPRINTS.pop(key, None) if key is not None else None
    return pending.result() if pending is not None else _sha256(path)


def prefetch_fingerprint(path: PathLike) -> None:
    """Start hashing ``path`` in a background thread (hashlib and file reads let go of the
    GIL): a 10 M-call trace (244 MB) takes ~0.12 s that a run would otherwise spend at its
    end. The result is used only while the file's size and mtime are unchanged."""
    from concurrent.futures import ThreadPoolExecutor

    key = _stat_key(path)
    if key is None or key in _FINGERPRINTS:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fingerprint")
    _FINGERPRINTS[key] = pool.submit(_sha256, path)
    pool.shutdown(wait=False)


_FINGERPRINTS: dict = {}


def _stat_key(path: PathLike):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (
        (os.path.realpath(path), st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
    )


def _sha256(path: PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
