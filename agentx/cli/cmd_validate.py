"""``agentx validate POINTS.csv``: the serving model against measured serving points."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import catalog_option, emit_json, json_option

METRIC_NAMES = {
    "tpot_ms": "TPOT",
    "ttft_ms": "TTFT",
    "output_tok_s_per_gpu": "output tok/s/GPU",
    "output_tok_s_per_user": "tok/s/user",
}


def spec_options(f):
    """``--draft-tokens`` / ``--acceptance``: how rows measured with MTP are modelled."""
    f = click.option(
        "--acceptance",
        type=click.FloatRange(0.0, 1.0),
        default=None,
        help="Per-token acceptance rate of speculative decoding; rows with spec_decoding=mtp "
        "are skipped without it.",
    )(f)
    return click.option(
        "--draft-tokens",
        type=click.IntRange(1, 16),
        default=None,
        help="Tokens drafted per step on MTP rows  [default: the row's launch recipe where "
        "known (docs/validation.md), else 1]",
    )(f)


@click.command(
    "validate",
    epilog="Example: agentx validate ../shared/reference/measured/inferencex-points.csv",
)
@click.argument("points", type=click.Path(dir_okay=False, path_type=Path))
@spec_options
@catalog_option
@json_option
def command(points, acceptance, draft_tokens, catalog_files, as_json) -> None:
    """Modelled vs measured TPOT, TTFT, output tok/s per GPU and tok/s per user, per row.

    POINTS is a CSV of measured serving points (columns in docs/validation.md). The summary
    gives median, p90 and worst |modelled/measured - 1| per metric over all compared rows and
    over the acceptance set (single node, no speculative decoding, not saturated).
    """
    from agentx.catalog import load_catalog
    from agentx.serving.points import read_points
    from agentx.serving.steady import Speculation
    from agentx.serving.validate import check_points, summary, validate_points

    cat = load_catalog(catalog_files)
    pts, skipped = read_points(points, cat)
    check_points(points, cat, pts)
    spec = Speculation(draft_tokens or 0, acceptance) if acceptance is not None else None
    recs, more = validate_points(cat, pts, spec)
    skipped = sorted(skipped + more, key=lambda s: s["row"])
    if as_json:
        emit_json(
            {
                "points": [
                    {k: r[k] for k in ("row", "metric", "measured", "modelled", "ratio")}
                    for r in recs
                ],
                "skipped": skipped,
            }
        )
        return
    from agentx.fmt import table

    click.echo(
        table(
            ("row", "metric", "measured", "modelled", "ratio", "set"),
            [
                (r["row"], METRIC_NAMES[r["metric"]], r["measured"], r["modelled"], r["ratio"],
                 "acceptance" if r["acceptance"] else "")
                for r in recs
            ],
            (True, False, True, True, True, False),
        )
    )  # fmt: skip
    for s in skipped:
        click.echo(f"skipped row {s['row']}: {s['reason']}")
    for label, sel in (("all", recs), ("acceptance set", [r for r in recs if r["acceptance"]])):
        parts = []
        for m, name in METRIC_NAMES.items():
            s = summary(sel, m)
            if s["n"]:
                parts.append(
                    f"{name} median {s['median']:.0%} p90 {s['p90']:.0%} worst {s['worst']:.0%} (n={s['n']})"
                )
        click.echo(f"{label}: |error| " + "; ".join(parts))
