"""The chain kernel's per-call KV outcome, kept compact and turned into ``PER_CALL`` rows per
partition, when the streaming replay asks for them.

A whole-trace ``PER_CALL`` frame is 9 columns of 8 bytes per call (720 MB at 10 M calls), made
by a scatter from time order into row order that touches every page of it. The streaming
driver (``agentx replay``) only ever needs one partition's rows at a time, so ``RowOutcome``
keeps the kernel's 7 integers per call in row order (32-bit unless a prompt reaches 2^31
tokens: 280 MB at 10 M), and makes a partition's frame with ``finish_frame`` itself: every
per-call value is computed by the same operations on the same integers, so the rows (and
calls.parquet) are bit-identical to slices of the whole frame.

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


class RowOutcome:
    """``PER_CALL`` rows of any row range (``slice``), from the kernel's ``acc`` (time order,
    ``row[k]``: the trace row of call k); ``summary`` once every row was sliced."""

    def __init__(self, acc: np.ndarray, row: np.ndarray, n_rows: int, cfg, summarize) -> None:
        if row.size != n_rows:  # every trace row is a call of the time order
            raise UsageError(f"expected {n_rows} calls in time order, got {row.size}")
        self._acc = np.empty_like(acc)  # int32 unless a prompt reaches 2^31 tokens
        self._acc[row] = acc  # one scatter pass into row order; partitions are then slices
        self._cfg, self._summarize = cfg, summarize
        self._sums: dict[str, float] = {c: 0.0 for c in PER_CALL}
        self._left = n_rows
        self.height = n_rows

    def slice(self, offset: int, length: int) -> pl.DataFrame:
        a = self._acc[offset : offset + length]
        cols = {f"kv_{t}_hit_tokens": a[:, i] for i, t in enumerate(("hbm", "dram", "ssd"))}
        cols["kv_recompute_tokens"] = a[:, 3]
        cols["kv_ssd_to_dram_bytes"] = a[:, 4]
        cols["kv_dram_to_hbm_bytes"] = a[:, 5]
        cols["kv_hbm_to_dram_bytes"] = cols["kv_dram_to_ssd_bytes"] = a[:, 6]
        row = np.arange(a.shape[0], dtype=np.int32)
        frame = finish_frame(cols, row, a.shape[0], self._cfg, self._cfg.kv_bytes_per_token)
        for c in PER_CALL:  # each partition's sums, added in partition order
            self._sums[c] += float(frame.get_column(c).sum())
        self._left -= a.shape[0]
        if self._left == 0:  # every row was made: the outcome can go before the merge
            self._acc = self._acc[:0]
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
