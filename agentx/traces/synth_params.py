"""The knobs of the synthetic generator (``agentx.traces.synth``) and its log-normal draws.

Defaults are the Weka Claude Code statistics: "W§2" marks a figure from
``shared/traces/SOURCES.md`` §2; "W603" marks one computed here from the same 603 shared
session files (with the session, trigger and compaction definitions of ``agentx.traces.fit``).
Log-normal quantities are given by their p50 and p90, the parametrisation ``--like`` fits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from agentx.errors import UsageError

Z90 = 1.2815515655446004  # standard normal 90th percentile: p90 = p50 · exp(Z90 · sigma)
PREFIX_BREAK_MAX_KEEP = 0.9  # W§2 counts a break when < 90 % of the previous blocks are reused
SHARES = (
    "prefix_break_share",
    "user_turn_share",
    "early_limit_share",
    "subagent_session_share",
    "resumed_session_share",
)


@dataclass(frozen=True)
class SynthParams:
    """Every knob of the generator; log-normal quantities are given by their p50 and p90."""

    # Main-agent calls per session (W§2 47 / 156 for all): W603 fresh 67 / 173, resumed 27.5 / 121.
    fresh_calls_per_session_p50: float = 67
    fresh_calls_per_session_p90: float = 173
    resumed_calls_per_session_p50: float = 27.5
    resumed_calls_per_session_p90: float = 121
    # First prompts are bimodal (W§2 p50 24,775 / p90 261,387): fresh sessions start near the
    # shared prefix, resumed ones carry a long earlier context. W603: 280 of 603 start at
    # ≥ 2 × prefix; fresh first prompt minus prefix 3,680 / 6,678; resumed 109,698 / 410,064.
    resumed_session_share: float = 0.464
    fresh_first_extra_tokens_p50: float = 3_680
    fresh_first_extra_tokens_p90: float = 6_678
    resumed_first_input_tokens_p50: float = 109_698
    resumed_first_input_tokens_p90: float = 410_064
    tool_appended_tokens_p50: float = 733  # W§2 appended per call 733 / 4,868
    tool_appended_tokens_p90: float = 4_868
    user_appended_tokens_p50: float = 733  # W§2 gives no split by trigger; --like fits one
    user_appended_tokens_p90: float = 4_868
    output_tokens_p50: float = 217  # W§2 217 / 894
    output_tokens_p90: float = 894
    tool_think_time_s_p50: float = 9  # W603 tool-result calls 9 / 67 s (all calls W§2: 10 / 158)
    tool_think_time_s_p90: float = 67
    user_think_time_s_p50: float = 128  # W603 user-text calls 128 / 2,125 s
    user_think_time_s_p90: float = 2_125
    api_time_s_p50: float = 6  # W§2 api time 6 / 18 s: spaces calls, t_k = t_k-1 + api + think
    api_time_s_p90: float = 18
    user_turn_share: float = 0.147  # W603 6,058 of 41,306 later main calls carry user text
    shared_prefix_tokens: int = 14_825  # W§2 tool + system tokens p50
    prefix_break_share: float = 0.0143  # W§2 607 prefix breaks without a size drop in 42,535 calls
    summary_tokens_p50: float = 18_900  # W603 post-compaction prompt minus prefix 18.9k / 54k
    summary_tokens_p90: float = 54_000
    context_limit_tokens: int = 1_000_000  # SEED-6
    early_limit_tokens: int = 165_000  # W603 pre-compaction prompt p50 151k / p90 165k
    early_limit_share: float = 0.0  # share of fresh sessions compacting at early_limit_tokens
    subagent_session_share: float = 0.027  # W§2 16 of 603 sessions
    subagents_per_session_mean: float = 3.7  # W§2 59 sub-agents in 16 sessions
    subagent_calls_p50: float = 11  # W603 calls per sub-agent 11 / 17 (mean 10.6 = 626 / 59)
    subagent_calls_p90: float = 17
    subagent_first_input_tokens_p50: float = 10_348  # W603 10,348 / 12,483
    subagent_first_input_tokens_p90: float = 12_483
    subagent_shared_prefix_tokens: int = 8_627  # W603 sub-agent tool + system tokens p50
    session_rate_per_s: float = 1 / 6  # Poisson arrivals; the Weka importer's default (603 in ~1 h)
    model: str | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "model":
                continue
            if (
                not isinstance(v, (int, float))
                or isinstance(v, bool)
                or not np.isfinite(v)
                or v < 0
            ):
                raise UsageError(f"synth parameter {f.name} must be a finite number ≥ 0, got {v!r}")
            if f.name.endswith("_p90") and v < getattr(self, f.name[:-3] + "p50"):
                raise UsageError(f"synth parameter {f.name} must be ≥ its p50, got {v!r}")
        for name in SHARES:
            if getattr(self, name) > 1:
                raise UsageError(
                    f"synth parameter {name} must be a share in [0, 1], got {getattr(self, name)!r}"
                )
        need = 2 * max(self.shared_prefix_tokens, self.subagent_shared_prefix_tokens) + 2
        for name in ("context_limit_tokens", "early_limit_tokens"):
            if getattr(self, name) < need:
                raise UsageError(
                    f"synth parameter {name} must be at least twice the shared prefix + 2 ({need:,} tokens), got {getattr(self, name):,}"
                )
        if self.session_rate_per_s <= 0:
            raise UsageError(
                f"synth parameter session_rate_per_s must be > 0, got {self.session_rate_per_s!r}"
            )

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def lognormal(rng: np.random.Generator, p50: float, p90: float, size: int) -> np.ndarray:
    """``size`` log-normal draws through (p50, p90); zeros when p50 is 0."""
    if p50 <= 0:
        return np.zeros(size)
    sigma = (np.log(max(p90, p50)) - np.log(p50)) / Z90
    return rng.lognormal(np.log(p50), sigma, size)


def lognormal_by(
    rng: np.random.Generator,
    mask: np.ndarray,
    if_true: tuple[float, float],
    if_false: tuple[float, float],
) -> np.ndarray:
    """One log-normal draw per element, (p50, p90) chosen by ``mask``: one normal array, not two."""
    mu = np.log(np.maximum([if_false[0], if_true[0]], 1e-300))
    sigma = (np.log(np.maximum([if_false[1], if_true[1]], 1e-300)) - mu) / Z90
    m = mask.astype(np.intp)
    x = np.exp(mu[m] + sigma[m] * rng.standard_normal(mask.size))
    return np.where(np.array([if_false[0], if_true[0]])[m] > 0, x, 0.0)


def lognormal_below(
    rng: np.random.Generator, p50: float, p90: float, cap: np.ndarray
) -> np.ndarray:
    """Log-normal draws truncated to ``≤ cap`` by redrawing (a clip would pile mass on the cap)."""
    x = lognormal(rng, p50, p90, cap.size)
    for _ in range(64):  # rounds, not calls: each round redraws only what is still too large
        over = np.flatnonzero(x > cap)
        if over.size == 0:
            break
        x[over] = lognormal(rng, p50, p90, over.size)
    return np.minimum(x, cap)


def whole_tokens(x: np.ndarray, lo: int = 1) -> np.ndarray:
    return np.maximum(np.rint(x), lo).astype(np.int64)
