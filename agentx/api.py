"""The Python API: the CLI's commands as functions returning values (docs/api.md).

``import agentx`` stays light: ``agentx/__init__.py`` loads this module on first use of any
of its names. Each function is the library path behind a command, so a notebook and
``agentx replay`` give the same numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from agentx.traces.io import Trace

TracePath = Trace | os.PathLike | str


def read_trace(path: os.PathLike | str) -> Trace:
    """A canonical trace file (``agentx import`` / ``agentx synth`` output), validated."""
    from agentx.traces.io import read_trace as _read

    return _read(path)


def _trace(trace: TracePath) -> Trace:
    return trace if isinstance(trace, Trace) else read_trace(trace)


def _prepare(trace: TracePath, catalog, model: str, load_scale: float, over_context: str):
    from agentx.traces.transform import fit_context, scale_load

    tr, rec = fit_context(_trace(trace), catalog.model(model).max_context_tokens, over_context)
    _warn(rec)
    return scale_load(tr, load_scale), rec


def _warn(rec: dict) -> None:
    if rec["mode"] == "warn" and rec["calls_over"]:
        import warnings

        warnings.warn(
            f"{rec['calls_over']:,} calls need more than the model's {rec['limit_tokens']:,}-token "
            "context and are priced as they are (over_context='compact', 'drop' or 'error')",
            stacklevel=3,
        )


@dataclass(frozen=True)
class Run:
    """A replay or simulation: its tables (name → polars frame) and its summary (dict)."""

    kind: str
    tables: dict[str, pl.DataFrame]
    summary: dict
    config: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {v.height:,}×{v.width}" for k, v in self.tables.items())
        return f"Run({self.kind!r}, tables: {shapes})"

    def chart(self, name: str | None = None):
        """An altair chart of this run; ``name`` one of :meth:`charts` (default: the first)."""
        from agentx.analysis import charts as C
        from agentx.errors import UnknownNameError

        makers = self._charts(C)
        if name is None:
            name = next(iter(makers))
        if name not in makers:
            raise UnknownNameError("chart", name, makers)
        return makers[name]()

    def charts(self) -> list[str]:
        from agentx.analysis import charts as C

        return list(self._charts(C))

    def _charts(self, C) -> dict:
        t, label = self.tables, self.config.get("label", self.kind)
        tag = pl.lit(label).alias("run")
        out = {}
        if "stages" in t:
            out["stages"] = lambda: C.stage_shares(t["stages"].with_columns(tag), by="run")
        if "footprint" in t:
            out["footprint"] = lambda: C.hbm_footprint(t["footprint"].with_columns(tag))
        if "calls" in t and all(f"kv_{x}_bytes" in t["calls"].columns for x in C.LINKS):
            out["kv_links"] = lambda: C.kv_link_bytes(t["calls"].with_columns(tag))
        if "frontier" in t:
            out["frontier"] = lambda: C.frontier(t["frontier"])
        if "sim_timeseries" in t:
            out["timeseries"] = lambda: C.sim_timeseries(t["sim_timeseries"])
        return out

    def write(self, run_dir: os.PathLike | str, *, inputs: dict | None = None) -> Path:
        """Save as a run directory that ``agentx sql`` and ``agentx report`` read; ``inputs``
        (name → file, e.g. ``{"trace": path}``) are fingerprinted into its run.json."""
        from agentx.runs import write_run

        config = {k: v for k, v in self.config.items() if k != "label"}
        return write_run(
            run_dir, self.kind, self.tables, summary=self.summary, inputs=inputs, config=config
        )


def replay(
    trace: TracePath,
    hw: str,
    model: str = "kimi-k2",
    gpus: int | None = None,
    *,
    kv_tiers: bool = True,
    load_scale: float = 1.0,
    over_context: str = "warn",
    decode_batch: int = 64,
    catalog_files=(),
    **config,
) -> Run:
    """``agentx replay``: every call priced on ``gpus`` × ``hw`` (tables calls, stages, footprint).

    ``config`` takes the other ``make_config`` settings (tp, ep, pp, dp_attention,
    weight_precision, kv_precision, prefill_chunk_tokens, routing_skew, pools).
    """
    from agentx.catalog import load_catalog
    from agentx.replay.config import make_config
    from agentx.replay.replay import replay_trace

    cat = load_catalog(catalog_files)
    cfg = make_config(cat, hw, model, gpus=gpus, decode_batch=decode_batch, **config)
    tr, ctx = _prepare(trace, cat, model, load_scale, over_context)
    kv = None
    if kv_tiers:
        from agentx.kv import replay_tiers

        kv = replay_tiers(tr, cfg)
    res = replay_trace(tr, cfg, kv=kv)
    summary = {**res.summary, "over_context": ctx, "load_scale": load_scale}
    tables = {"calls": res.calls, "stages": res.stages, "footprint": res.footprint}
    conf = {"hw": hw, "model": model, "gpus": cfg.gpus, "label": f"{cfg.gpus} × {hw}"}
    return Run("replay", tables, summary, conf)


def simulate(
    trace: TracePath,
    hw: str,
    model: str = "kimi-k2",
    gpus: int | None = None,
    *,
    policy: str = "greedy",
    pools: str = "disaggregated",
    fill_gpus: int | None = None,
    load_scale: float = 1.0,
    over_context: str = "warn",
    catalog_files=(),
    **sim,
) -> Run:
    """``agentx simulate``: the trace stepped in time (tables sim_calls, sim_timeseries).

    ``sim`` takes ``SimConfig`` fields (max_batch, chunk_tokens, max_wait_s, sample_s, …).
    """
    from agentx.catalog import load_catalog
    from agentx.dynamics.admission import AdmissionPolicy
    from agentx.dynamics.disagg import run_layout
    from agentx.dynamics.engine import SimConfig
    from agentx.replay.config import make_config

    cat = load_catalog(catalog_files)
    gpus = gpus or make_config(cat, hw, model).gpus
    tr, ctx = _prepare(trace, cat, model, load_scale, over_context)
    cfg = SimConfig(pools=pools, **sim)
    res = run_layout(tr.calls, cat, hw, model, gpus, pools, AdmissionPolicy(policy), cfg, fill_gpus)
    s = {**res.summary, "over_context": ctx, "load_scale": load_scale}
    s["output_tokens_per_s_per_gpu"] = s["output_tokens"] / max(s["span_s"], 1e-9) / gpus
    tables = {"sim_calls": res.calls, "sim_timeseries": res.timeseries}
    return Run("simulate", tables, s, {"hw": hw, "model": model, "gpus": gpus})


def compare(
    trace: TracePath,
    hw: str | list[str],
    model: str = "kimi-k2",
    *,
    slo: str | dict | None = None,
    gpus: list[int] | None = None,
    usd_per_gpu_hour: float | None = None,
    load_scale: float = 1.0,
    over_context: str = "warn",
    catalog_files=(),
    **config,
) -> Run:
    """``agentx compare``: per system the fewest GPUs serving the load within ``slo``.

    Tables: compare (one row per system), configurations (every layout tried), frontier
    (Pareto points of output tokens/s per GPU against tokens/s per user). ``summary["answer"]``
    is the sentence the CLI prints first.
    """
    from agentx.catalog import load_catalog
    from agentx.planner.answer import headline
    from agentx.planner.search import compare as _compare
    from agentx.planner.slo import DEFAULT, parse_slo
    from agentx.traces.transform import fit_context

    cat = load_catalog(catalog_files)
    systems = [h.strip() for h in hw.split(",")] if isinstance(hw, str) else list(hw)
    limits = parse_slo(slo or DEFAULT) if not isinstance(slo, dict) else slo
    tr, ctx = fit_context(_trace(trace), cat.model(model).max_context_tokens, over_context)
    _warn(ctx)
    results, tried, frontier = _compare(
        cat, tr, systems, model, limits, load_scale=load_scale, gpus=gpus,
        usd_per_gpu_hour=usd_per_gpu_hour, **config,
    )  # fmt: skip
    summary = {
        "model": model, "slo": limits, "load_scale": load_scale, "over_context": ctx,
        "systems": results, "answer": headline(results, limits),
    }  # fmt: skip
    tables = {"compare": pl.DataFrame(results), "configurations": tried, "frontier": frontier}
    return Run("compare", tables, summary, {"hw": ",".join(systems), "model": model})
