"""Service levels: ``"tpot_p99<=50ms,ttft_p99<=3s"`` → {metric: limit in seconds}."""

from __future__ import annotations

import re

from agentx.errors import UsageError, did_you_mean
from agentx.units import parse_duration_s

# What the cost model can check: decode time per output token (one step of the decode batch
# at the trace's mean decode context: the model has one step time per batch, so it stands for
# the p99 of a loaded server) and time to first token percentiles of the trace's fills.
METRICS = ("tpot_p99", "ttft_p50", "ttft_p90", "ttft_p99")
DEFAULT = "tpot_p99<=50ms,ttft_p99<=3s"
_TERM = re.compile(r"^\s*([a-z0-9_]+)\s*<=\s*([0-9.eE+-]+\s*(?:ms|s|min)?)\s*$")


def parse_slo(text: str) -> dict[str, float]:
    """Each ``metric<=value`` term, value with a unit (ms, s, min; bare numbers are seconds)."""
    out: dict[str, float] = {}
    for term in filter(str.strip, text.split(",")):
        m = _TERM.match(term)
        if not m:
            raise UsageError(
                f"--slo term '{term.strip()}' is not METRIC<=VALUE (e.g. tpot_p99<=50ms)"
            )
        name, value = m.group(1), m.group(2)
        if name not in METRICS:
            raise UsageError(
                f"--slo: unknown metric '{name}'{did_you_mean(name, METRICS)}; "
                f"choose from {', '.join(METRICS)}"
            )
        try:
            seconds = parse_duration_s(value)
        except ValueError:
            raise UsageError(f"--slo: '{value}' is not a duration (e.g. 50ms, 3s)") from None
        if not seconds > 0:
            raise UsageError(f"--slo: {name} must be > 0, got '{value}'")
        out[name] = seconds
    return out


def describe_slo(slo: dict[str, float]) -> str:
    from agentx.fmt import num

    return ", ".join(f"{k} ≤ {num(v * 1e3)} ms" for k, v in slo.items()) or "none"
