"""One unit system for everything agentx prints: GB (1e9 bytes), ms, J, tokens/s.

Tables and summaries keep SI base units in their column names (``_bytes``, ``_s``, ``_j``,
docs/metrics.md); only what a person reads is converted, and always by these constants, so a
quantity has the same unit in every command, the report and the Python API.
"""

from __future__ import annotations

GB = 1e9  # bytes; decimal, as the catalog's HBM and link figures (NOTES.md units)
MS = 1e-3  # seconds
HOUR_S = 3600.0
MILLION = 1e6

# A displayed column name for a base-unit column: suffix → (display suffix, divide by).
DISPLAY = {
    "_bytes": ("_gb", GB),
    "_bytes_per_gpu": ("_gb_per_gpu", GB),
    "_bytes_per_s": ("_gb_per_s", GB),
    "_s": ("_ms", MS),
}


def gb(n_bytes: float) -> float:
    """Bytes as GB (1e9)."""
    return float(n_bytes) / GB


def ms(seconds: float) -> float:
    """Seconds as milliseconds."""
    return float(seconds) / MS


def parse_duration_s(text: str) -> float:
    """``"50ms"``, ``"3s"``, ``"0.05"`` (seconds) → seconds; ValueError on anything else."""
    t = text.strip().lower()
    for suffix, scale in (("ms", MS), ("s", 1.0), ("min", 60.0)):
        if t.endswith(suffix) and not (suffix == "s" and t.endswith("ms")):
            return float(t[: -len(suffix)]) * scale
    return float(t)
