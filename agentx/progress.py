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
