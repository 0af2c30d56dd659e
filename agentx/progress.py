"""Progress reporting that library code can call; silent unless stderr is a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(
    items: Iterable[T], *, total: int | None = None, label: str = "", enabled: bool | None = None
) -> Iterator[T]:
    """Yield ``items`` and draw a one-line bar on stderr at most 10 times a second."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    last = 0.0
    i = 0
    for i, item in enumerate(items, 1):
        now = time.monotonic()
        if now - last > 0.1:
            last = now
            frac = f"{i}/{total}" if total else f"{i}"
            bar = ""
            if total:
                filled = int(30 * i / total)
                bar = "[" + "#" * filled + "." * (30 - filled) + "] "
            sys.stderr.write(f"\r{label} {bar}{frac}")
            sys.stderr.flush()
        yield item
    sys.stderr.write(f"\r{label} done ({i})" + " " * 20 + "\n")
    sys.stderr.flush()


class Phases:
    """Named steps of vectorized work (read, price, write, …) shown as ``label [k/n] step``.

    Vectorized stages have no per-item loop to count, so long commands report which phase
    runs and how long each took; like :func:`progress`, silent unless stderr is a terminal.
    """

    def __init__(self, label: str, total: int, *, enabled: bool | None = None) -> None:
        self.label, self.total, self.k = label, total, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._t0 = self._start = time.monotonic()

    def step(self, name: str) -> None:
        self.k += 1
        if self.enabled:
            now = time.monotonic()
            sys.stderr.write(f"\r{self.label} [{self.k}/{self.total}] {name}…" + " " * 20)
            sys.stderr.flush()
            self._start = now

    def done(self) -> None:
        if self.enabled:
            total = time.monotonic() - self._t0
            sys.stderr.write(f"\r{self.label} done in {total:.1f} s" + " " * 40 + "\n")
            sys.stderr.flush()
