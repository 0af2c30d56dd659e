"""Import speed on the real shared traces: files/s, calls/s, MB/s (no assertions, just figures).

Run: ``python benchmarks/bench_import.py [SHARED_TRACES_DIR]``. MB counts the bytes the parser
reads (the unpacked JSON for gzipped Weka files). Each format is timed once, cold.
"""

from __future__ import annotations

import gzip
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentx.traces.importers import load_trace  # noqa: E402
from agentx.traces.io import write_trace  # noqa: E402


def unpacked_bytes(files: list[Path]) -> int:
    total = 0
    for f in files:
        if f.name.endswith(".gz"):
            with gzip.open(f) as g:
                total += sum(len(chunk) for chunk in iter(lambda g=g: g.read(1 << 24), b""))
        else:
            total += f.stat().st_size
    return total


def bench(fmt: str, source: Path, files: list[Path], **options) -> None:
    size_mb = unpacked_bytes(files) / 1e6
    t0 = time.perf_counter()
    trace = load_trace(fmt, source, **options)
    t_load = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t1 = time.perf_counter()
        write_trace(trace, Path(d) / "out.parquet")
        t_write = time.perf_counter() - t1
        out_mb = (Path(d) / "out.parquet").stat().st_size / 1e6
    n = trace.calls.height
    print(
        f"{fmt:9s} {len(files):4d} files {size_mb:8.1f} MB {n:7,d} calls | read {t_load:6.2f} s: "
        f"{len(files) / t_load:7.1f} files/s {n / t_load:9,.0f} calls/s {size_mb / t_load:6.1f} MB/s"
        f" | write {t_write:5.2f} s ({out_mb:.1f} MB Parquet)"
    )


def main(shared: Path) -> None:
    weka = shared / "weka-claude-code"
    bench("weka", weka, sorted(weka.glob("*.json.gz")), progress_bar=False)
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        path = shared / "mooncake-fast25" / name
        bench("mooncake", path, [path])
    azure = shared / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    bench("azure", azure, [azure])


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "traces")
