"""Whole-output atomic writes: one file or a whole run folder appears complete or not at all.

Every output (one file or a whole run folder) is first written to a temporary sibling named
``.<name>.agentx-tmp-<pid>`` and renamed into place in one step, so a failed or killed command
never leaves a partial output; an older output is replaced only once the new one is complete
(old renamed aside to ``.<name>.agentx-old-<pid>``, new renamed in, old deleted). Siblings of
that naming left by a killed process are removed by the next command writing the same path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from agentx.errors import one_line
from agentx.io.paths import OutputError, PathLike, UnwritableError, _why, check_output

TMP_TAG = ".agentx-tmp-"
OLD_TAG = ".agentx-old-"


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
    with _staged(dest, path, _probe) as tmp:
        yield tmp
        tmp.touch()  # a writer that wrote nothing still leaves its (empty) output


def _probe(tmp: Path) -> None:
    """Check that the temporary file can be made, and leave its name free for the writer to
    create: a writer opening an existing file truncates it, and ext4 (auto_da_alloc) then
    writes the whole file out to disk when it is closed, before close returns (0.4 s for a
    1 GB calls.parquet, measured); a file the writer creates is left to the kernel's
    writeback. File contents are not fsynced either way: the rename guards against a kill,
    not a power cut."""
    tmp.touch()
    tmp.unlink()


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
    except UnwritableError as exc:  # a file staged inside this one: named where it would be
        inner = Path(exc.path)
        if not inner.is_relative_to(tmp):
            raise
        raise UnwritableError(Path(shown) / inner.relative_to(tmp), exc.why) from None
    finally:
        _remove(tmp)


def write_text_atomic(path: PathLike, text: str, inputs: Iterable[PathLike | None] = ()) -> None:
    with atomic_path(path, inputs=inputs) as tmp:
        tmp.write_text(text, encoding="utf-8")
