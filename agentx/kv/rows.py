"""The chain kernel's per-call KV outcome, kept compact and turned into ``PER_CALL`` rows per
partition, when the streaming replay asks for them.

A whole-trace ``PER_CALL`` frame is 9 columns of 8 bytes per call (720 MB at 10 M calls). The
streaming driver (``agentx replay``) only ever needs one partition's rows at a time, so
``RowOutcome`` keeps the kernel's 7 integers per call (32-bit unless a prompt reaches 2^31
tokens: 280 MB at 10 M) in trace row order, as ``chain_outcomes(by_row=...)`` puts them
beside the kernel, slices a partition's rows when asked, and lets go of them once every row
was. It makes a partition's frame with ``finish_frame`` itself: every per-call value is
computed by the same operations on the same integers, so the rows (and calls.parquet) are
bit-identical to slices of the whole frame.

The summary's per-link float sums add the partitions' sums in order (as the out-of-core replay
does, agentx.replay.outofcore), so they are complete once every row has been sliced; a float
sum can differ from the whole column's in the last bits, like the stage sums of a streamed
replay (docs/metrics.md).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from agentx.errors import UsageError
from agentx.kv.tiers import PER_CALL, finish_frame

BLOCK_ROWS = 1 << 16  # rows per block of the bookkeeping that refuses a row sliced twice


def acc_columns(acc: np.ndarray) -> dict[str, np.ndarray]:
    """``finish_frame``'s input from the kernel's ``acc`` columns (views): byte columns go in
    as token counts (finish_frame scales them); write-through's two created-bytes columns are
    one array."""
    cols = {f"kv_{t}_hit_tokens": acc[:, i] for i, t in enumerate(("hbm", "dram", "ssd"))}
    cols["kv_recompute_tokens"] = acc[:, 3]
    cols["kv_ssd_to_dram_bytes"] = acc[:, 4]
    cols["kv_dram_to_hbm_bytes"] = acc[:, 5]
    cols["kv_hbm_to_dram_bytes"] = cols["kv_dram_to_ssd_bytes"] = acc[:, 6]
    return cols


class RowOutcome:
    """``PER_CALL`` rows of any row range (``slice``), from the kernel's ``acc`` in trace row
    order (``chain_outcomes(by_row=...)`` puts it there beside the kernel); ``summary`` once
    every row was sliced. ``acc`` is let go once every row was made; a block of
    ``block_rows`` rows whose every row was sliced is refused a second time."""

    def __init__(self, acc: np.ndarray, n_rows: int, cfg, summarize,
                 block_rows: int = BLOCK_ROWS) -> None:  # fmt: skip
        if acc.shape[0] != n_rows:  # every trace row is a call
            raise UsageError(f"expected the outcome of {n_rows} calls, got {acc.shape[0]}")
        self._acc = acc
        self._width, self._dtype = acc.shape[1], acc.dtype
        self._b = block_rows
        self._left_in = [min(block_rows, n_rows - a) for a in range(0, n_rows, block_rows)]
        self._cfg, self._summarize = cfg, summarize
        self._sums: dict[str, float] = {c: 0.0 for c in PER_CALL}
        self._left = n_rows
        self.height = n_rows

    def _take(self, offset: int, length: int) -> np.ndarray:
        b, end = self._b, offset + length
        for k in range(offset // b, -(-end // b)):
            if self._left_in[k] == 0:
                raise UsageError(f"rows {offset}..{end - 1} of the KV outcome were sliced before")
            self._left_in[k] -= min(end, (k + 1) * b) - max(offset, k * b)
        if length == 0:
            return np.zeros((0, self._width), self._dtype)
        out = self._acc[offset:end]  # a view: finish_frame only reads it
        if self._left == length:  # the last rows: the outcome goes
            self._acc = None
        return out

    def slice(self, offset: int, length: int) -> pl.DataFrame:
        if offset < 0 or length < 0 or offset + length > self.height:
            raise UsageError(
                f"rows {offset}..{offset + length - 1} are outside 0..{self.height - 1}"
            )
        a = self._take(offset, length)
        row = np.arange(a.shape[0], dtype=np.int32)
        bpt = self._cfg.kv_bytes_per_token
        frame = finish_frame(acc_columns(a), row, a.shape[0], self._cfg, bpt, every_row=True)
        for c in PER_CALL:  # each partition's sums, added in partition order
            self._sums[c] += float(frame.get_column(c).sum())
        self._left -= a.shape[0]
        return frame

    @property
    def summary(self) -> dict:
        """summary.json["kv_tiers"]; the per-link sums need every row sliced first."""
        if self._left != 0:
            raise UsageError(f"{self._left} rows of the KV outcome were not sliced yet")
        return self._summarize(pl.DataFrame({c: [v] for c, v in self._sums.items()}))


class LazyKvResult:
    """``KvResult``'s shape for the streaming replay: ``per_call`` is a ``RowOutcome``."""

    def __init__(self, per_call: RowOutcome) -> None:
        self.per_call = per_call

    @property
    def summary(self) -> dict:
        return self.per_call.summary
