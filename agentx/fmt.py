"""The one number formatter: CLI tables, one-line summaries and the HTML report all use it.

Rules (so the same quantity always reads the same): integers with thousands separators;
floats with 4 significant digits and thousands separators from 1e-3 up to 1e9, scientific
with 4 significant digits outside that range; exact 0 as ``0``; NaN as ``NaN``; booleans
as yes/no; None as an empty cell. Shares (columns ending ``_share``) are fractions and stay
fractions (0.4731), never percent, so ``--json`` and the table agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SIG = 4


def num(v: object) -> str:
    """One value as text."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == 0:
            return "0"
        if v.is_integer() and abs(v) < 1e9:
            return f"{int(v):,}"
        r = float(f"{v:.{SIG - 1}e}")  # rounded first, so 999,999,999.5 and 0.00099996 land
        if 1e-3 <= abs(r) < 1e9:  # on the side of the range their printed form belongs to
            return _trim(f"{r:,.{_decimals(r)}f}")
        return f"{r:.{SIG - 1}e}"
    return str(v)


def _decimals(v: float) -> int:
    # 4 significant digits, never fewer than 0 decimals (1,234.5 → 1,235 — 4 digits kept).
    return max(0, SIG - 1 - int(math.floor(math.log10(abs(v)))))


def _trim(s: str) -> str:
    return s.rstrip("0").rstrip(".") if "." in s else s


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[bool]) -> str:
    """A plain aligned text table (no box drawing, so it pastes cleanly into issues and mail)."""
    cells = [[num(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def frame(df) -> str:
    """A polars DataFrame as :func:`table`."""
    return table(df.columns, list(df.iter_rows()), [df.schema[c].is_numeric() for c in df.columns])
