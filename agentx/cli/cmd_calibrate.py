"""``agentx calibrate POINTS.csv -o overlay.toml``: per-system efficiencies from measurements."""

from __future__ import annotations

from pathlib import Path

import click

from agentx.cli._common import catalog_option, emit_json, json_option, output_file_option


@click.command(
    "calibrate",
    epilog="Example: agentx calibrate ../shared/reference/measured/inferencex-points.csv "
    "--hw b200 -o b200-calibrated.toml && agentx validate POINTS.csv --catalog b200-calibrated.toml",
)
@click.argument("points", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--hw",
    "systems",
    multiple=True,
    help="Fit only these systems (repeatable; default: every system in POINTS).",
)
@click.option(
    "--fit",
    default="hbm_scale,request_overhead_s",
    show_default=True,
    help="Parameters to fit, comma-separated, among compute_scale, hbm_scale, comm_scale, "
    "floor_scale, request_overhead_s; the others keep their catalog values (docs/validation.md "
    "'After agentx calibrate' says why two by default).",
)
@click.option("--no-cv", is_flag=True, help="Skip the leave-one-group-out cross-validation (slow).")
@output_file_option("Catalog overlay TOML to write (use it with --catalog).")
@catalog_option
@json_option
def command(points, systems, fit, no_cv, output, catalog_files, as_json) -> None:
    """Fit achieved HBM bandwidth and request overhead per system (--fit: also compute,
    communication and kernel-floor terms).

    Robust least squares (Huber IRLS) on log(modelled/measured) of TPOT, TTFT and output
    tok/s per GPU over the non-speculative, non-saturated rows of POINTS. Prints the error
    before and after per point, the leave-one-group-out error, and writes an overlay whose
    entries start from the built-in systems (base = ...).
    """
    from agentx.catalog import load_catalog
    from agentx.errors import UsageError
    from agentx.io import ensure_distinct, write_text_atomic
    from agentx.serving.calibrate import (
        FITTED,
        calibrate,
        check_fit,
        fit_points,
        leave_one_group_out,
        overlay_toml,
    )
    from agentx.serving.points import read_points
    from agentx.serving.validate import check_points, model_point

    fit = check_fit(n.strip() for n in fit.split(",") if n.strip())
    ensure_distinct(output, [points, *catalog_files])
    cat = load_catalog(catalog_files)
    pts, _ = read_points(points, cat)
    check_points(points, cat, pts)
    hws = list(systems) or None
    if hws:
        for hw in hws:
            cat.system(hw)  # unknown names → did-you-mean
        missing = [hw for hw in hws if not any(p.hardware == hw for p in fit_points(pts))]
        if missing:
            raise UsageError(f"no usable measured point for --hw {missing[0]} in {points}")
    params, fitted = calibrate(cat, pts, hws, fit)
    usable = [p for p in fit_points(pts) if hws is None or p.hardware in hws]
    cv = {} if no_cv else leave_one_group_out(cat, pts, hws, fit)
    rows = []
    for p in usable:
        before, after = model_point(cat, p), model_point(fitted, p)
        for k in FITTED:
            if k in p.measured:
                rows.append(
                    {
                        "row": p.row,
                        "metric": k,
                        "measured": p.measured[k],
                        "before": before[k] / p.measured[k],
                        "after": after[k] / p.measured[k],
                        "cross_validated": cv[p.row][k] / p.measured[k] if p.row in cv else None,
                    }
                )
    write_text_atomic(output, overlay_toml(params, str(points), fit))
    if as_json:
        emit_json({"params": params, "fitted": list(fit), "points": rows, "output": str(output)})
        return
    from agentx.fmt import num, table

    click.echo(
        table(
            ("row", "metric", "measured", "before", "after", "CV"),
            [
                (r["row"], r["metric"], r["measured"], r["before"], r["after"],
                 r["cross_validated"])
                for r in rows
            ],
            (True, False, True, True, True, True),
        )
    )  # fmt: skip
    for hw, vals in params.items():
        click.echo(
            f"{hw}: "
            + ", ".join(f"{k.removeprefix('calibrated_')} {num(v)}" for k, v in vals.items())
        )
    for label, key in (
        ("before", "before"),
        ("after", "after"),
        ("leave-one-group-out", "cross_validated"),
    ):
        e = sorted(abs(r[key] - 1) for r in rows if r[key] is not None)
        if e:
            med, p90 = e[len(e) // 2], e[min(len(e) - 1, int(0.9 * len(e)))]
            click.echo(
                f"{label}: |error| median {med:.0%} p90 {p90:.0%} worst {e[-1]:.0%} (n={len(e)})"
            )
    click.echo(f"wrote {output}")
