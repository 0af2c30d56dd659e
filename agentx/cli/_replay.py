"""The parts ``agentx replay`` is built from beside its flow (the command, ``cmd_replay``): the
calls.parquet options (--calls, --chunk-rows), the in-memory replay's inputs (the trace, its KV
tier outcome, the operating point), the per-call columns priced, and the printed result.
"""

from __future__ import annotations

import dataclasses

import click
import polars as pl

from agentx.cli._common import apply_over_context, print_table
from agentx.fmt import num
from agentx.units import GB


def calls_options(f):
    """--calls and --chunk-rows, in this order: what calls.parquet holds, and how many calls
    are priced and written at a time."""
    for opt in reversed(
        (
            click.option(
                "--calls",
                "calls_mode",
                type=click.Choice(["summary", "full", "none"]),
                default="summary",
                show_default=True,
                help="calls.parquet: the columns queries use (docs/metrics.md), every per-call column "
                "(adds per-stage FLOPs and bytes), or none.",
            ),
            click.option(
                "--chunk-rows",
                type=int,
                # agentx.replay.chunks.CHUNK_ROWS (not imported: --help stays fast)
                default=1 << 19,
                show_default=True,
                help="Calls priced and written per partition (cut between sessions); results do not depend on it.",
            ),
        )
    ):
        f = opt(f)
    return f


def _priced_columns(kv_tiers: bool) -> tuple[str, ...]:
    from agentx.kv.tiers import PER_CALL
    from agentx.replay.replay import CALL_COLUMNS

    return (*CALL_COLUMNS, *(PER_CALL if kv_tiers else ()))


def _load(trace, cfg, kv_tiers, load_scale, over_context, interactivity, quiet, phases, max_refs,
          fingerprint=False, chunk_rows=None):  # fmt: skip
    """The in-memory replay's inputs: the trace, its KV tier outcome, the operating point,
    and (``cuts``, a function, or None) the partitions of ``chunk_rows`` calls it is priced
    in. ``fingerprint``: hash the trace file for run.json beside the KV kernel (the read
    before it keeps both cores busy; the kernel leaves one idle)."""
    from agentx import warm
    from agentx.replay.pricing import KV_COLUMNS, TRACE_COLUMNS
    from agentx.traces.io import read_trace, read_trace_columns

    phases.step("reading the trace")
    if load_scale == 1.0 and over_context == "warn":
        # only the columns pricing and the KV model read stay in memory (every row is validated)
        # session ids as UInt32 codes in the ids' order (4 B per call, written back as the ids)
        tr = read_trace_columns(
            trace, [*TRACE_COLUMNS, *(KV_COLUMNS if kv_tiers else ())], session_codes=True
        )
    else:  # the transforms rewrite sessions and compactions: they see the whole trace
        tr = read_trace(trace)
    warm.ready()  # numba and the kernels, imported during the read (cmd_replay)
    from agentx.traces.transform import scale_load

    tr, context = apply_over_context(tr, cfg.model.max_context_tokens, over_context, quiet=quiet)
    tr = scale_load(tr, load_scale)
    operating_point = None
    if interactivity is not None:
        from agentx.replay.interactivity import decode_context_tokens, with_interactivity

        cfg, operating_point = with_interactivity(
            cfg, interactivity, decode_context_tokens(tr.calls)
        )
    kv = arrived = cuts = None
    if kv_tiers:
        from concurrent.futures import ThreadPoolExecutor

        from agentx.kv import replay_tiers
        from agentx.kv.blocks import MAX_REFS
        from agentx.replay.timeline import arrivals

        phases.step("placing KV blocks in HBM/DRAM/SSD")
        # the HBM peak's arrival order (a sort of 10 M start times) and the partitions (where
        # the writer would wait for them) are made on the core the chain kernel leaves idle,
        # instead of at the end beside the writer and the quantiles, and at the first partition
        pool, box = ThreadPoolExecutor(max_workers=1), []

        def beside(by_time, calls=tr.calls):
            box.append(pool.submit(arrivals, calls, by_time))
            if chunk_rows is not None:
                from agentx.replay.chunks import session_cuts

                box.append(pool.submit(session_cuts, calls, chunk_rows))
            if fingerprint:
                from agentx.io import prefetch_fingerprint

                prefetch_fingerprint(trace, pool)

        refs = MAX_REFS if max_refs is None else max_refs
        kv = replay_tiers(tr, cfg, max_refs=refs, lazy=True, beside=beside)
        pool.shutdown(wait=False)
        arrived = box[0].result if box else None
        cuts = box[1].result if len(box) > 1 else None
        # the columns only the KV model reads go before pricing (calls.parquet never has them)
        tr = dataclasses.replace(tr, calls=tr.calls.drop(KV_COLUMNS, strict=False))
    return tr, kv, cfg, operating_point, context, arrived, cuts


def _print(result) -> None:
    s = result.summary
    st = result.stages.select(
        "stage",
        "time_s",
        "time_share",
        "energy_j",
        "energy_share",
        "j_per_output_token",
        "arithmetic_intensity",
        # traffic moved, not capacity (that is the footprint table below)
        (pl.col("hbm_bytes") / GB).alias("hbm_traffic_gb"),
        (pl.col("comm_bytes") / GB).alias("link_traffic_gb"),
    )
    click.echo(
        f"{s['model']} on {s['layout']}: {num(s['calls'])} calls, {num(s['tokens']['output_tokens'])} output tokens"
    )
    if "interactivity" in s:
        op = s["interactivity"]
        click.echo(
            f"decode batch {op['decode_batch']} for {num(op['target_tokens_per_s_per_user'])} tokens/s per user "
            f"at {num(op['context_tokens'])} tokens of context ({num(op['tokens_per_s_per_user'])} reached; "
            f"limited by {op['limited_by']})"
        )
    print_table(st)
    click.echo(
        f"total {num(s['total_time_s'])} instance-s, {num(s['total_energy_j'])} J, "
        f"{num(s['j_per_output_token'])} J per output token"
    )
    click.echo("")
    print_table(
        result.footprint.select("component", (pl.col("bytes_per_gpu") / GB).alias("gb_per_gpu"))
    )
    verdict = "fits" if s["kv_fits_in_hbm"] else "does NOT fit"
    click.echo(
        f"HBM peak per GPU {num(s['hbm_peak_bytes_per_gpu'] / GB)} GB of {num(s['hbm_capacity_bytes_per_gpu'] / GB)} GB "
        f"({verdict}; {num(s['kv_resident_sequences'])} sequences, {num(s['kv_resident_tokens'])} tokens resident)"
    )
