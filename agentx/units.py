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

# Sizes that are per token or per element stay in bytes (40,016 B per token reads better than
# 4.0e-05 GB); capacities and traffic are shown in GB.
_SMALL = ("_bytes_per_token", "_bytes_per_element", "bytes_per_param")


def gb(n_bytes: float) -> float:
    """Bytes as GB (1e9)."""
    return float(n_bytes) / GB


def rss_gb(maxrss_kib: float) -> float:
    """A peak RSS as Linux's ``getrusage`` reports it (``ru_maxrss``, in KiB) as GB (1e9)."""
    return float(maxrss_kib) * 1024 / GB


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


def display(key: str, value: object) -> tuple[str, object]:
    """A catalog or summary field as a person reads it: ``hbm_bytes`` 1.86e11 → ``hbm_gb`` 186."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and "_bytes" in key and not any(t in key for t in _SMALL):
        return key.replace("_bytes", "_gb", 1), value / GB
    return key, value
