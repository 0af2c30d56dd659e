"""Run manifests name inputs by SHA-256 (agentx.io.file_fingerprint); a replay starts the hash
early (prefetch_fingerprint) and must get the same answer, or a fresh one for a changed file."""

from __future__ import annotations

import hashlib
import os

from agentx.io import file_fingerprint, prefetch_fingerprint


def test_prefetched_fingerprint_equals_a_fresh_one_and_follows_a_changed_file(tmp_path):
    """A hash started early is used only for the same unchanged file; a file rewritten since
    (new size or mtime) is hashed again."""
    f = tmp_path / "t.bin"
    f.write_bytes(b"a" * 3_000_000)
    prefetch_fingerprint(f)
    assert file_fingerprint(f) == hashlib.sha256(b"a" * 3_000_000).hexdigest()
    prefetch_fingerprint(f)
    f.write_bytes(b"b" * 3_000_001)
    os.utime(f, ns=(1, 1))
    assert file_fingerprint(f) == hashlib.sha256(b"b" * 3_000_001).hexdigest()
    prefetch_fingerprint(tmp_path / "missing.bin")  # nothing to hash: no error, no entry
