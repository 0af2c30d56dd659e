"""Measured serving points (an InferenceX-style CSV) → agentx deployments.

The CSV columns are defined in docs/validation.md ("Measured-points CSV"); the file
``../shared/reference/measured/inferencex-points.csv`` is read as is. Each data row becomes a
``Point``: the deployment (system, model, per-component precision, per-worker layout, pools),
the benchmark shape (ISL, OSL, concurrency) and the measured metrics. Rows that cannot be
mapped (no layout stated, GPU counts missing, speculative decoding without an acceptance
rate) are skipped with a reason; malformed rows are errors naming file, row and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from agentx.errors import InputError, did_you_mean

REQUIRED = (
    "hardware",
    "model",
    "precision",
    "parallelism",
    "isl_tokens",
    "osl_tokens",
    "concurrency",
    "tpot_ms",
    "ttft_ms",
    "output_tok_s_per_gpu",
    "output_tok_s_per_user",
)
OPTIONAL = (
    "framework",
    "spec_decoding",
    "disagg",
    "n_gpus",
    "n_prefill_gpus",
    "n_decode_gpus",
    "notes",
    "measured_date",
)
METRICS = ("tpot_ms", "ttft_ms", "output_tok_s_per_gpu", "output_tok_s_per_user")
# Checkpoint names of the measured files → catalog models (same architecture; Llama-3.3-70B
# has Llama-3.1-70B's shape, Kimi K2.5 the Kimi K2 backbone per InferenceX-app blog notes).
MODEL_ALIASES = {
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "moonshotai/kimi-k2.5": "kimi-k2",
    "nvidia/kimi-k2.5-nvfp4": "kimi-k2",
    "amd/kimi-k2.5-mxfp4": "kimi-k2",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "meta-llama/llama-3.3-70b-instruct": "llama3.1-70b",
}
PRECISIONS = ("fp8", "fp4", "int4", "bf16")
# Engines whose default KV cache dtype is the model dtype (BF16) unless told otherwise; TRT-LLM
# recipes in InferenceX run FP8 KV [E: engine defaults, SGLang/vLLM kv_cache_dtype="auto"].
BF16_KV_ENGINES = ("sglang", "vllm", "atom", "dynamo-sglang", "dynamo-vllm", "mori-sglang")
SATURATED = ("consistency flag", "queueing-dominated")
_WORKER = re.compile(r"tp(\d+)(?:\s*ep(\d+))?(\s*dp-attn)?")
_DISAGG = re.compile(r"P\s*(\d*)x?\s*\((.*?)\)\s*/\s*D\s*(\d*)x?\s*\((.*?)\)")


@dataclass(frozen=True)
class Worker:
    gpus: int
    tp: int
    ep: int
    dp_attention: bool


@dataclass(frozen=True)
class Point:
    row: int
    hardware: str
    model: str
    framework: str
    precision: str
    isl_tokens: int
    osl_tokens: int
    concurrency: int
    disagg: bool
    spec: bool
    saturated: bool
    worker: Worker | None = None  # single node
    prefill: Worker | None = None
    prefill_workers: int = 0
    decode: Worker | None = None
    decode_workers: int = 0
    measured: dict = field(default_factory=dict)
    measured_date: str = ""  # ISO date of the run: the launch script of that day applies

    @property
    def single_node(self) -> bool:
        return not self.disagg

    @property
    def group(self) -> str:
        """Leave-one-group-out unit: one system, model, precision and engine."""
        return f"{self.hardware}/{self.model}/{self.precision}/{self.framework}"


def read_points(path: Path, catalog) -> tuple[list[Point], list[dict]]:
    """Parse ``path``; returns (points, skipped rows as {row, reason})."""
    try:
        df = pl.read_csv(path, infer_schema_length=0)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError, OSError) as err:
        raise InputError(path, f"not a readable CSV ({str(err).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(
            path,
            f"missing column(s) {', '.join(missing)}; see docs/validation.md",
            field=missing[0],
        )
    points, skipped = [], []
    for i, rec in enumerate(df.iter_rows(named=True)):
        p, reason = _point(path, i, rec, catalog)
        if p is None:
            skipped.append({"row": i, "reason": reason})
        else:
            points.append(p)
    return points, skipped


def _num(path, row, rec, key, *, integer=False, positive=True, optional=False):
    v = rec.get(key)
    if v is None or str(v).strip() == "":
        if optional:
            return None
        raise InputError(path, "expected a number, got an empty cell", row=row, field=key)
    try:
        x = float(v)
    except ValueError:
        raise InputError(path, f"expected a number, got '{v}'", row=row, field=key) from None
    if x != x or x in (float("inf"), float("-inf")) or (positive and x <= 0) or x < 0:
        want = "a number > 0" if positive else "a number >= 0"
        raise InputError(path, f"expected {want}, got '{v}'", row=row, field=key)
    if integer:
        if x != int(x):
            raise InputError(path, f"expected a whole number, got '{v}'", row=row, field=key)
        return int(x)
    return x


def _worker(path, row, text: str, width: int | None = None) -> Worker:
    m = _WORKER.search(text)
    if not m:
        raise InputError(
            path, f"expected 'tpN epM [dp-attn]', got '{text}'", row=row, field="parallelism"
        )
    tp, ep = int(m.group(1)), int(m.group(2) or 1)
    if tp < 1 or ep < 1:
        raise InputError(
            path, f"tp and ep must be >= 1, got '{text}'", row=row, field="parallelism"
        )
    # tp×ep is a legacy count in some records (SOURCES.md); the worker's GPUs are tp wide.
    return Worker(gpus=width or tp, tp=tp, ep=ep, dp_attention=bool(m.group(3)))


def _point(path, i, rec, catalog) -> tuple[Point | None, str]:
    hw = (rec.get("hardware") or "").strip().lower()
    if hw not in catalog.systems:
        raise InputError(
            path,
            f"unknown hardware '{hw}'{did_you_mean(hw, catalog.systems)}",
            row=i,
            field="hardware",
        )
    raw_model = (rec.get("model") or "").strip()
    model = MODEL_ALIASES.get(raw_model.lower(), raw_model.lower())
    if model not in catalog.models:
        known = sorted(set(catalog.models) | set(MODEL_ALIASES))
        raise InputError(
            path,
            f"unknown model '{raw_model}'{did_you_mean(raw_model, known)}",
            row=i,
            field="model",
        )
    prec = (rec.get("precision") or "").strip().lower()
    if prec not in PRECISIONS:
        raise InputError(
            path,
            f"expected one of {', '.join(PRECISIONS)}, got '{prec}'",
            row=i,
            field="precision",
        )
    isl = _num(path, i, rec, "isl_tokens", integer=True)
    osl = _num(path, i, rec, "osl_tokens", integer=True)
    conc = _num(path, i, rec, "concurrency", integer=True)
    measured = {}
    for k in METRICS:
        v = _num(path, i, rec, k, optional=True)
        if v is not None:
            measured[k] = v
    disagg = str(rec.get("disagg") or "").strip().lower() == "true"
    spec = str(rec.get("spec_decoding") or "").strip().lower() not in ("", "none")
    notes = str(rec.get("notes") or "")
    base = dict(
        row=i,
        hardware=hw,
        model=model,
        framework=(rec.get("framework") or "").strip().lower(),
        precision=prec,
        isl_tokens=isl,
        osl_tokens=osl,
        concurrency=conc,
        disagg=disagg,
        spec=spec,
        saturated=any(s in notes for s in SATURATED),
        measured=measured,
        measured_date=str(rec.get("measured_date") or "").strip(),
    )
    par = (rec.get("parallelism") or "").strip()
    if not par:
        return None, "parallelism not stated (TP / GPU count unknown)"
    if not measured:
        return None, "no measured metric"
    if not disagg:
        return Point(worker=_worker(path, i, par), **base), ""
    m = _DISAGG.search(par)
    if not m:
        raise InputError(
            path, f"expected 'P nx(tp ep) / D mx(tp ep)', got '{par}'", row=i, field="parallelism"
        )
    npg = _num(path, i, rec, "n_prefill_gpus", integer=True, optional=True)
    ndg = _num(path, i, rec, "n_decode_gpus", integer=True, optional=True)
    if npg is None or ndg is None:
        return None, "disaggregated row without n_prefill_gpus / n_decode_gpus"
    nw_p, nw_d = int(m.group(1) or 1), int(m.group(3) or 1)
    if npg % nw_p or ndg % nw_d:
        raise InputError(
            path,
            f"{npg} prefill / {ndg} decode GPUs do not split into {nw_p} / {nw_d} workers",
            row=i,
            field="n_prefill_gpus" if npg % nw_p else "n_decode_gpus",
        )
    pw = _worker(path, i, m.group(2), npg // nw_p)
    dw = _worker(path, i, m.group(4), ndg // nw_d)
    return (
        Point(prefill=pw, prefill_workers=nw_p, decode=dw, decode_workers=nw_d, **base),
        "",
    )
