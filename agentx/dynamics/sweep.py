"""Operating-point sweeps: latency–throughput curves per stage and system (SEED-18..21).

For each configuration (system × GPU count) every operating point is one row of columns
computed by the cost model in one vectorized call per stage, never a loop of replays:

- decode: batch size × context → step time, per-user tokens/s (1 / step), tokens/s per GPU;
- prefill and midfill: fill batch (requests sharing each forward pass) × prompt or append size
  → time to first token (the batch's time: all its requests finish together) against
  input tokens/s per GPU. ``chunk_tokens`` is the tokens per forward pass.

Each point also carries joules per token and the peak HBM per GPU with its KV resident
(``agentx.replay.footprint``), and ``fits`` whether that is within the chip's HBM.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.errors import CapacityError

DECODE_BATCHES = np.unique(np.round(np.geomspace(1, 1024, 41))).astype(np.int64)
DECODE_CONTEXTS = np.array([2_048, 8_192, 32_768, 65_536, 131_072])
FILL_BATCHES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
PREFILL_TOKENS = np.array([2_048, 8_192, 32_768, 131_072])
MIDFILL_APPENDS = np.array([256, 1_024, 4_096])
MIDFILL_PREFIXES = np.array([32_768, 131_072])
COLUMNS = (
    "system",
    "gpus",
    "model",
    "stage",
    "batch_size",
    "chunk_tokens",
    "context_tokens",
    "new_tokens",
    "per_user_tokens_per_s",
    "tokens_per_s_per_gpu",
    "ttft_s",
    "step_time_s",
    "energy_per_token_j",
    "hbm_peak_bytes_per_gpu",
    "fits",
)


def _grid(*axes):
    mesh = np.meshgrid(*axes, indexing="ij")
    return [m.ravel().astype(np.float64) for m in mesh]


def _hbm(cfg, kv_tokens):
    from agentx.replay.footprint import footprint_per_gpu

    fp = footprint_per_gpu(cfg, kv_tokens, double_buffer=False)
    return np.broadcast_to(np.asarray(fp.total_bytes, dtype=np.float64), np.shape(kv_tokens))


def decode_points(cfg) -> dict[str, np.ndarray]:
    from agentx.replay.stages import decode_attention_step, decode_experts_step

    b, ctx = _grid(DECODE_BATCHES, DECODE_CONTEXTS)
    a = decode_attention_step(cfg, b, b * ctx)
    x = decode_experts_step(cfg, b)
    step = a["time_s"] + x["time_s"]
    hbm = _hbm(cfg, b * ctx)
    return {
        "stage": np.full(b.shape, "decode"),
        "batch_size": b,
        "chunk_tokens": b,
        "context_tokens": ctx,
        "new_tokens": np.ones_like(b),
        "per_user_tokens_per_s": 1.0 / step,
        "tokens_per_s_per_gpu": b / step / cfg.gpus,
        "ttft_s": np.full(b.shape, np.nan),
        "step_time_s": step,
        "energy_per_token_j": (a["energy_j"] + x["energy_j"]) / b,
        "hbm_peak_bytes_per_gpu": hbm,
        "fits": hbm <= cfg.chip.hbm_bytes,
    }


def fill_points(cfg, stage: str) -> dict[str, np.ndarray]:
    from agentx.replay.stages import fill_cost

    if stage == "prefill":
        b, n = _grid(FILL_BATCHES, PREFILL_TOKENS)
        p = np.zeros_like(n)
    else:
        b, n, p = _grid(FILL_BATCHES, MIDFILL_APPENDS, MIDFILL_PREFIXES)
    per_pass = np.maximum(b * np.minimum(n, cfg.prefill_chunk_tokens), n)
    c = fill_cost(cfg, n, p, batch_tokens=per_pass)
    ttft = b * c["time_s"]  # instance-seconds of the whole batch = its wall time on the instance
    hbm = _hbm(cfg, b * (p + n))
    return {
        "stage": np.full(b.shape, stage),
        "batch_size": b,
        "chunk_tokens": per_pass,
        "context_tokens": p + n,
        "new_tokens": n,
        "per_user_tokens_per_s": n / ttft,
        "tokens_per_s_per_gpu": b * n / ttft / cfg.gpus,
        "ttft_s": ttft,
        "step_time_s": np.full(b.shape, np.nan),
        "energy_per_token_j": c["energy_j"] / n,
        "hbm_peak_bytes_per_gpu": hbm,
        "fits": hbm <= cfg.chip.hbm_bytes,
    }


def sweep_config(cfg) -> pl.DataFrame:
    parts = [decode_points(cfg), fill_points(cfg, "prefill"), fill_points(cfg, "midfill")]
    cols = {k: np.concatenate([np.asarray(d[k]) for d in parts]) for k in parts[0]}
    n = cols["batch_size"].shape[0]
    df = pl.DataFrame(
        {
            "system": [cfg.system.name] * n,
            "gpus": np.full(n, cfg.gpus),
            "model": [cfg.model.name] * n,
            **cols,
        }
    )
    return df.with_columns(
        pl.col("batch_size", "chunk_tokens", "context_tokens", "new_tokens").cast(pl.Int64),
        pl.col("ttft_s", "step_time_s").fill_nan(None),  # null where the stage has no such time
    ).select(COLUMNS)


def sweep(
    catalog, systems, gpus, model: str = "kimi-k2", **config
) -> tuple[pl.DataFrame, list[dict]]:
    """All operating points of every (system, GPU count) that holds the model's weights.

    Returns the points and one note per configuration that was skipped (and why).
    """
    from agentx.replay.config import make_config
    from agentx.replay.footprint import check_fits

    frames, skipped = [], []
    for hw in systems:
        for g in gpus:
            cfg = make_config(
                catalog, hw=hw, model=model, gpus=int(g), pools="aggregated", **config
            )
            try:
                check_fits(cfg)
            except CapacityError as err:
                skipped.append({"system": hw, "gpus": int(g), "reason": str(err)})
                continue
            frames.append(sweep_config(cfg))
    if not frames:
        return pl.DataFrame(schema={c: pl.Null for c in COLUMNS}), skipped
    return pl.concat(frames), skipped


def frontier(
    df: pl.DataFrame, x: str, y: str, *, by=("system", "gpus", "stage"), maximize_y: bool = True
) -> pl.DataFrame:
    """The Pareto frontier of each group: points not beaten on both ``x`` (higher) and ``y``."""
    sign = -1 if maximize_y else 1
    return (
        df.filter(pl.col("fits"))
        .sort([*by, x], descending=[False] * len(by) + [True])
        .with_columns(_best=(pl.col(y) * -sign).cum_max().over(list(by)))
        .filter((pl.col(y) * -sign) >= pl.col("_best"))
        .drop("_best")
    )


def load_scenario(name_or_path: str) -> tuple[dict, str]:
    """A sweep scenario: a bundled name (``replay/*.toml``, e.g. ``seed-study``) or a TOML path.

    Returns the ``[scenario]`` table (plus ``[checks]``) and where it came from.
    """
    import importlib.resources
    import math
    import tomllib
    from pathlib import Path

    from agentx.errors import InputError, UnknownNameError

    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise InputError(p, "scenario file not found")
        label, data = str(p), p.read_bytes()
    else:
        bundled = {
            f.name[:-5]: f
            for f in importlib.resources.files("agentx.scenarios").iterdir()
            if f.name.endswith(".toml")
        }
        if name_or_path not in bundled:
            raise UnknownNameError("scenario", name_or_path, bundled)
        label, data = f"agentx.scenarios/{name_or_path}.toml", bundled[name_or_path].read_bytes()
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(label, f"expected TOML, got: {exc}") from None
    sc = doc.get("scenario")
    if not isinstance(sc, dict):
        raise InputError(label, "expected a [scenario] table", field="scenario")
    for key, kind in (("systems", list), ("gpus", list), ("model", str)):
        if not isinstance(sc.get(key), kind) or not sc[key]:
            raise InputError(
                label,
                f"expected {'a non-empty list' if kind is list else 'a name'}",
                field=f"scenario.{key}",
            )
    if not all(isinstance(s, str) and s for s in sc["systems"]):
        raise InputError(
            label, f"expected system names, got {sc['systems']!r:.60}", field="scenario.systems"
        )
    checks = doc.get("checks", {})
    if not isinstance(checks, dict):
        raise InputError(label, "expected a [checks] table", field="checks")
    for key, v in checks.items():
        if type(v) not in (int, float) or not math.isfinite(v) or v <= 0:
            raise InputError(
                label, f"expected a positive number, got {v!r:.40}", field=f"checks.{key}"
            )
    if not all(isinstance(g, int) and g > 0 for g in sc["gpus"]):
        raise InputError(
            label, f"expected positive integers, got {sc['gpus']}", field="scenario.gpus"
        )
    return {**sc, "checks": doc.get("checks", {})}, label
