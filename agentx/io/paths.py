"""The output-path guard: an output is never an input, never holds one, never lies inside one.

``check_output`` runs before anything is written (every atomic write calls it), so nothing the
user brought is ever overwritten; an output the system refuses is one line (``UnwritableError``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from agentx.errors import AgentxError, InputError, UsageError, one_line

PathLike = os.PathLike | str


class OutputError(UsageError):
    """An output path that must not be written: it is, holds or lies in an input (exit 2)."""


class UnwritableError(AgentxError):
    """An output path the system does not let us write (exit 1, like an unreadable input)."""

    def __init__(self, path: PathLike, exc: BaseException | str) -> None:
        self.path, self.why = path, exc if isinstance(exc, str) else _why(exc)
        super().__init__(f"{one_line(path)}: cannot write here ({self.why})")


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


def ensure_distinct(
    output: PathLike, inputs: Iterable[PathLike | None], *, inside_ok: bool = False
) -> None:
    """Refuse to write an output onto, into or around one of the inputs (see check_output)."""
    check_output(output, inputs, inside_ok=inside_ok)
