"""The one error tree users see.

Every user mistake becomes an ``AgentxError`` with a one-line message; the CLI prints it
without a traceback and exits with ``exit_code`` (1 for bad input, 2 for usage errors).
Library code never uses ``assert`` for user input.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentxError(Exception):
    """Base class: a problem the user can act on. ``str(err)`` is the one-line message."""

    exit_code = 1


# Control characters in a name (a newline in a session id or file name) would split an error
# over lines; they are written as escapes, as are undecodable bytes of a file name.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
_CONTROL.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def one_line(value: object) -> str:
    """``str(value)`` on one line: control characters and lone surrogates escaped."""
    text = str(value).translate(_CONTROL)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class UsageError(AgentxError):
    """The command line itself is wrong (unknown option value, conflicting flags)."""

    exit_code = 2


class InputError(AgentxError):
    """A file's content is wrong: names the file, the row (or session/call) and the field."""

    def __init__(
        self,
        path: object,
        message: str,
        *,
        row: int | None = None,
        field: str | None = None,
        where: str | None = None,
    ) -> None:
        self.path = one_line(path)
        self.row = row
        self.field = field
        parts = [self.path]
        if row is not None:
            parts.append(f"row {row}")
        if where:
            parts.append(one_line(where))
        if field is not None:
            parts.append(f"field '{one_line(field)}'")
        super().__init__(": ".join(parts) + ": " + message)


class CatalogError(AgentxError):
    """A catalog entry (chip, system, model) is missing or inconsistent."""


class UnknownNameError(UsageError):
    """An unknown catalog or option name, answered with the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        self.kind, self.name, self.known = kind, name, known
        super().__init__(f"unknown {kind} '{name}'{did_you_mean(name, known)}")


class CapacityError(AgentxError):
    """A configuration cannot hold what it must (e.g. weights exceed HBM)."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name, or a list of the known ones."""
    known = sorted(known)
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    if close:
        return f"; did you mean '{close[0]}'?"
    if known and len(known) <= 12:
        return "; known: " + ", ".join(known)
    return ""
