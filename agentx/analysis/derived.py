"""Per-call columns that follow from stored ones: SQL expressions, not bytes in calls.parquet.

``agentx sql`` adds each to a run view that has its inputs and lacks the column itself
(docs/metrics.md, "Derived in agentx sql"), so ``replay --calls summary`` loses no query.
"""

from __future__ import annotations

import re

STAGE_SUM = " + ".join(
    f"{s}_{{k}}" for s in ("prefill", "midfill", "decode_attention", "decode_experts")
)
HITS = "kv_hbm_hit_tokens + kv_dram_hit_tokens + kv_ssd_hit_tokens"
DERIVED: dict[str, dict[str, str]] = {
    "replay_calls": {
        "fill_time_s": "prefill_time_s + midfill_time_s",
        "decode_time_s": "decode_attention_time_s + decode_experts_time_s",
        "total_time_s": STAGE_SUM.format(k="time_s"),
        "total_energy_j": STAGE_SUM.format(k="energy_j"),
        "kv_hit_tokens": HITS,
        # write-through, the policy of every replay: a block written to DRAM goes on to SSD
        # in the same call (agentx/kv/tiers.py)
        "kv_dram_to_ssd_bytes": "kv_hbm_to_dram_bytes",
        "kv_hit_ratio": f"CASE WHEN reused_prefix_tokens > 0 THEN ({HITS}) / reused_prefix_tokens END",
    }
}
_NAME = re.compile(r"\b[a-z_][a-z0-9_]*\b")
_SQL_WORDS = {"case", "when", "then", "end", "else"}


def derived_columns(view: str, columns) -> str:
    """The select list of ``view`` over a frame of ``columns``: ``*``, then ``, expr AS name``
    for every derived column computable from ``columns`` and not among them. One that is
    among them (runs stored it, others left it out: ``--calls full`` beside ``summary``) is
    the stored value where there is one, else the expression (``* REPLACE``)."""
    have = set(columns)
    add, fill = [], []
    for name, expr in DERIVED.get(view, {}).items():
        needs = set(_NAME.findall(expr)) - _SQL_WORDS
        if needs <= have:
            if name in have:
                fill.append(f'COALESCE("{name}", {expr}) AS "{name}"')
            else:
                add.append(f', {expr} AS "{name}"')
    return ("*" + (f" REPLACE ({', '.join(fill)})" if fill else "")) + "".join(add)
