"""Files in and out: whole-output atomic writes, the output-path guard, strict JSON, guarded reads.

Every output (one file or a whole run folder) is first written to a temporary sibling named
``.<name>.agentx-tmp-<pid>`` and renamed into place in one step, so a failed or killed command
never leaves a partial output; an older output is replaced only once the new one is complete
(old renamed aside to ``.<name>.agentx-old-<pid>``, new renamed in, old deleted). Siblings of
that naming left by a killed process are removed by the next command writing the same path.
Before anything is written, ``check_output`` refuses an output that is, holds, or lies inside
an input, so nothing the user brought is ever overwritten.

This package is the one place callers import from (``from agentx.io import atomic_dir``); each
part has one owner:

- ``paths``: the output-path guard (``check_output``, ``ensure_distinct``) and its errors;
- ``atomic``: staging, swapping in and cleaning up whole outputs (``atomic_dir``,
  ``atomic_path``, ``write_text_atomic``, ``clean_stale``);
- ``jsonout``: strict JSON (``strict_json``, ``dumps_json``, ``write_json_atomic``);
- ``parquet``: the one Parquet layout written (``write_parquet_atomic``, ``write_parquet_file``,
  ``ParquetAppender``) and the guarded read (``read_parquet_checked``, ``decode_metadata``);
- ``inputs``: input files (``regular_file``) and their fingerprints (``file_fingerprint``,
  ``prefetch_fingerprint``).
"""

from __future__ import annotations

from agentx.io.atomic import (
    OLD_TAG,
    RUN_FILES_SUFFIXES,
    TMP_TAG,
    atomic_dir,
    atomic_path,
    clean_stale,
    write_text_atomic,
)
from agentx.io.inputs import file_fingerprint, prefetch_fingerprint, regular_file
from agentx.io.jsonout import dumps_json, strict_json, write_json_atomic
from agentx.io.parquet import (
    ROW_GROUP_ROWS,
    ParquetAppender,
    decode_metadata,
    read_parquet_checked,
    write_parquet_atomic,
    write_parquet_file,
)
from agentx.io.paths import (
    OutputError,
    PathLike,
    UnwritableError,
    check_output,
    ensure_distinct,
)

__all__ = [
    "OLD_TAG",
    "ROW_GROUP_ROWS",
    "RUN_FILES_SUFFIXES",
    "TMP_TAG",
    "OutputError",
    "ParquetAppender",
    "PathLike",
    "UnwritableError",
    "atomic_dir",
    "atomic_path",
    "check_output",
    "clean_stale",
    "decode_metadata",
    "dumps_json",
    "ensure_distinct",
    "file_fingerprint",
    "prefetch_fingerprint",
    "read_parquet_checked",
    "regular_file",
    "strict_json",
    "write_json_atomic",
    "write_parquet_atomic",
    "write_parquet_file",
    "write_text_atomic",
]
