"""The planner's answer in sentences: what the CLI prints first and the report opens with."""

from __future__ import annotations

from agentx.fmt import num
from agentx.planner.slo import describe_slo


def system_sentence(r: dict) -> str:
    """``GB200: 16 GPUs (…), 4.934 J per output token, $10.05 per M output tokens, …``."""
    usd = (
        f"${num(r['usd_per_m_output_tokens'])} per M output tokens"
        if r.get("usd_per_m_output_tokens") is not None
        else "no price (give --usd-per-gpu-hour)"
    )
    miss = "" if r["meets_slo"] else " — does NOT meet the SLO (closest layout shown)"
    return (
        f"{r['hw'].upper()}: {num(r['gpus'])} GPU{'s' if r['gpus'] != 1 else ''} ({_instances(r)}), "
        f"{num(r['j_per_output_token'])} J per output token, {usd}, "
        f"{num(r['output_tok_s_per_gpu'])} output tokens/s per GPU, "
        f"peak HBM {num(r['hbm_peak_gb_per_gpu'])} GB per GPU{miss}"
    )


def headline(results: list[dict], slo: dict) -> str:
    """One line per system, then which is cheapest (by $ where priced, else by GPUs)."""
    lines = [system_sentence(r) for r in results]
    ok = [r for r in results if r["meets_slo"]]
    priced = [r for r in ok if r.get("usd_per_m_output_tokens") is not None]
    if len(ok) > 1:
        if len(priced) == len(ok):
            best = min(priced, key=lambda r: r["usd_per_m_output_tokens"])
            why = f"${num(best['usd_per_m_output_tokens'])} per M output tokens"
        else:
            best = min(ok, key=lambda r: r["gpus"])
            why = f"{num(best['gpus'])} GPUs"
        lines.append(f"Cheapest within {describe_slo(slo)}: {best['hw'].upper()} ({why}).")
    elif not ok:
        lines.append(f"No system meets {describe_slo(slo)}.")
    return "\n".join(lines)


def _instances(r: dict) -> str:
    return r["layout"]  # names aggregated or disaggregated and the instances of each pool
