"""agentx.io.direct: a file written around the page cache holds exactly the bytes given, in
order, whether O_DIRECT is used, refused at open, or refused at a write; errors reach close."""

from __future__ import annotations

import errno
import os
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentx.io import direct
from agentx.io.direct import DirectFile

SMALL_BLOCK = 2 * direct.ALIGN_BYTES  # buffers of two aligned blocks: many device writes


def _direct_ok(folder) -> bool:
    """Whether this file system takes O_DIRECT writes of aligned page-sized buffers."""
    if not hasattr(os, "O_DIRECT"):
        return False
    import mmap

    path = os.path.join(folder, "probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o666)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, direct.ALIGN_BYTES)
        os.pwrite(fd, buf, 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.remove(path)


def _fd_flags(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    raise AssertionError("no flags line")


def _write(path, chunks) -> DirectFile:
    f = DirectFile(path)
    total = 0
    for c in chunks:
        assert f.write(c) == len(c)
        total += len(c)
        assert f.tell() == total
    f.close()
    return f


chunk_sizes = st.lists(
    st.one_of(
        st.integers(0, 64),
        st.integers(SMALL_BLOCK - 3, SMALL_BLOCK + 3),
        st.integers(0, 5 * SMALL_BLOCK),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(sizes=chunk_sizes, seed=st.integers(0, 255))
def test_bytes_are_the_concatenation_in_order(tmp_path_factory, sizes, seed):
    """Any sequence of writes, across buffer and block boundaries, ends as exactly their bytes
    (the last partial block included); ``tell`` counts what was written."""
    folder = tmp_path_factory.mktemp("direct")
    chunks = [bytes((seed + i + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK):
        _write(folder / "f.bin", chunks)
    assert (folder / "f.bin").read_bytes() == b"".join(chunks)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_DIRECT is Linux's")
def test_o_direct_is_used_where_the_file_system_takes_it(tmp_path):
    if not _direct_ok(tmp_path):
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")
    data = os.urandom(3 * SMALL_BLOCK + 123)
    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK):
        f = DirectFile(tmp_path / "f.bin")
        assert f.direct
        assert _fd_flags(f._fd) & os.O_DIRECT
        f.write(data)
        f.close()
    assert f.direct  # every whole block went around the page cache
    assert (tmp_path / "f.bin").read_bytes() == data


def test_a_file_system_refusing_o_direct_at_open_gets_plain_writes(tmp_path):
    real_open = os.open

    def refuse(path, flags, *a):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    data = os.urandom(2 * SMALL_BLOCK + 77)
    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK), mock.patch("os.open", refuse):
        f = _write(tmp_path / "f.bin", [data[:5000], data[5000:]])
    assert not f.direct
    assert (tmp_path / "f.bin").read_bytes() == data


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")
def test_a_device_refusing_a_direct_write_gets_the_rest_through_the_page_cache(tmp_path):
    """EINVAL at a write (a device wanting larger alignment) or a short write: that buffer and
    every later one go through the page cache, and the bytes are still right."""
    if not _direct_ok(tmp_path):
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")
    real = os.pwrite
    calls = []

    def once(fd, view, at):
        calls.append(at)
        if len(calls) == 2:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, view, at)

    data = os.urandom(5 * SMALL_BLOCK + 9)
    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK), mock.patch("os.pwrite", once):
        f = _write(tmp_path / "f.bin", [data])
    assert not f.direct
    assert (tmp_path / "f.bin").read_bytes() == data


def test_a_write_error_reaches_close(tmp_path):
    def full(fd, view, at):
        raise OSError(errno.ENOSPC, "No space left on device")

    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK), mock.patch("os.pwrite", full):
        f = DirectFile(tmp_path / "f.bin")
        f.write(os.urandom(SMALL_BLOCK + 1))
        with pytest.raises(OSError, match="No space left"):
            f.close()
    f.close()  # closed once: a second close does nothing


def test_a_full_disk_under_a_replay_is_one_line_and_leaves_no_run(tmp_path):
    """The device's error reaches the user as the one-line refusal of an unwritable output,
    and the run folder never appears (nor a temporary sibling)."""
    from _hostile import SAMPLE_DIR, assert_refused

    trace = SAMPLE_DIR / "weka-sample.parquet"
    out = tmp_path / "run"

    def full(fd, view, at):
        raise OSError(errno.ENOSPC, "No space left on device")

    # every write fails, around the page cache or through it
    with mock.patch("os.pwrite", full):
        err = assert_refused(
            ["replay", trace, "--hw", "gb200", "--over-context", "compact", "-q", "-o", out],
            inputs=[trace],
            output=out,
        )
    assert err == f"Error: {out / 'calls.parquet'}: cannot write here (No space left on device)\n"


def test_any_error_of_the_device_thread_is_raised_and_never_hangs_the_writer(tmp_path):
    """More whole buffers than there are buffers: had the device thread died on an unexpected
    error, the writer would wait forever for a buffer back."""
    import threading

    def broken(fd, view, at):
        raise RuntimeError("device gone")

    got: list[BaseException] = []

    def write_many() -> None:
        f = DirectFile(tmp_path / "f.bin")
        try:
            for _ in range(4 * direct.BUFFERS):
                f.write(bytes(SMALL_BLOCK))
        except RuntimeError as err:  # a later write raises the device's error
            got.append(err)
        with pytest.raises(RuntimeError, match="device gone"):
            f.close()
        got.append(None)

    with mock.patch.object(direct, "BLOCK_BYTES", SMALL_BLOCK), mock.patch("os.pwrite", broken):
        t = threading.Thread(target=write_many, daemon=True)
        t.start()
        t.join(timeout=30)
    assert not t.is_alive(), "the writer hung waiting for a buffer"
    assert got[-1] is None and all(isinstance(e, RuntimeError) for e in got[:-1])
