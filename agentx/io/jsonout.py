"""Strict JSON: the one encoder of every JSON agentx writes (no NaN or Infinity, sorted keys,
deterministic bytes) and its atomic file write. Equal objects give equal bytes, so a run
written twice has byte-identical JSON files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from agentx.io.atomic import write_text_atomic
from agentx.io.paths import PathLike


def strict_json(obj: object) -> object:
    """``obj`` with every NaN and ±inf replaced by null, numpy scalars as Python numbers.

    JSON has no NaN or Infinity (RFC 8259); jq, JavaScript and Go refuse them. A value that is
    undefined or unbounded is null in every JSON agentx writes.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return strict_json(obj.item())
    if hasattr(obj, "tolist"):  # numpy arrays
        return strict_json(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset)):
        return strict_json(sorted(obj, key=str))
    return str(obj)


def dumps_json(obj: object, *, indent: int | None = 2) -> str:
    """The one JSON encoder: strict (no NaN/Infinity), sorted keys, deterministic bytes."""
    return json.dumps(strict_json(obj), indent=indent, sort_keys=True, allow_nan=False)


def write_json_atomic(path: PathLike, obj: object) -> None:
    """Deterministic strict JSON (sorted keys, fixed indent) so equal inputs give equal bytes."""
    write_text_atomic(path, dumps_json(obj) + "\n")
