"""A large output written once, around the page cache: ``DirectFile`` (Linux ``O_DIRECT``).

Written through the page cache, every byte of a file takes a page of memory the kernel
first has to find: on this project's 2-core VMs, whose hypervisor takes freed guest memory
back, that is a page the host must back again, and writing a 10 M-call calls.parquet (760 MB)
cost the writer thread 1.2-1.9 s of system time, most of the replay's pricing loop
(``dd`` of 760 MB: 1.2-2.5 s of system time through the page cache, 0.08 s with O_DIRECT).
The file is read later, if at all, so keeping it in memory buys nothing. ``DirectFile`` copies
what it is given into a few page-aligned buffers, reused, and a thread writes each full one
straight to the device while the next fills. Only the last partial block goes through the page
cache. Where ``O_DIRECT`` does not exist or a file system refuses it, the same writes go
through the page cache: same bytes, only slower.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import queue
import threading

BLOCK_BYTES = 1 << 23  # one buffer, one device write
BUFFERS = 3  # one filling, one being written, one spare: the writer rarely waits for the device
ALIGN_BYTES = 4096  # O_DIRECT offsets and lengths: a multiple of any common logical block size
# (O_BINARY: Windows, where a descriptor is opened in text mode otherwise)
_WRITE = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_FLAGS = _WRITE | os.O_CREAT | os.O_TRUNC


class DirectFile:
    """A write-only binary file for a streaming writer (pyarrow's ``ParquetWriter`` takes it
    as its sink): ``write`` appends, ``close`` waits for the device and raises any error a
    write met. ``direct`` says whether the bytes go around the page cache."""

    mode = "wb"

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = os.fspath(path)
        self.direct = hasattr(os, "O_DIRECT")
        self._fd = -1
        if self.direct:
            try:
                self._fd = os.open(self.path, _FLAGS | os.O_DIRECT, 0o666)
            except OSError as err:
                if err.errno != errno.EINVAL:  # EINVAL: this file system refuses O_DIRECT
                    raise
                self.direct = False
        if self._fd < 0:
            self._fd = os.open(self.path, _FLAGS, 0o666)
        self._bufs = [mmap.mmap(-1, BLOCK_BYTES) for _ in range(BUFFERS)]  # page-aligned
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for b in self._bufs[1:]:
            self._free.put(b)
        self._buf, self._fill, self._at = self._bufs[0], 0, 0  # _at: file offset of _buf
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self.closed = False
        self._thread = threading.Thread(target=self._device, name="calls-io", daemon=True)
        self._thread.start()

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at + self._fill

    def flush(self) -> None:
        """Nothing to do: bytes reach the device a whole buffer at a time, and at ``close``."""

    def write(self, data) -> int:
        if self._error is not None:
            raise self._error
        src = memoryview(data).cast("B")
        n, i = len(src), 0
        while i < n:
            k = min(n - i, BLOCK_BYTES - self._fill)
            self._buf[self._fill : self._fill + k] = src[i : i + k]
            self._fill += k
            i += k
            if self._fill == BLOCK_BYTES:
                self._todo.put((self._buf, BLOCK_BYTES, self._at))
                self._at += BLOCK_BYTES
                self._buf, self._fill = self._free.get(), 0
        return n

    def close(self) -> None:
        """Write what is left, wait for the device, close; raise the first write error."""
        if self.closed:
            return
        self.closed = True
        whole = self._fill - self._fill % ALIGN_BYTES
        if whole:
            self._todo.put((self._buf, whole, self._at))
        self._todo.put(None)
        self._thread.join()
        tail = self._buf[whole : self._fill]  # bytes: shorter than a block, so not O_DIRECT
        try:
            if tail and self._error is None:
                fd = os.open(self.path, _WRITE)
                try:
                    _write_all(fd, tail, self._at + whole)
                finally:
                    os.close(fd)
        except OSError as err:
            self._error = self._error or err
        finally:
            os.close(self._fd)
            for b in self._bufs:
                with contextlib.suppress(BufferError):  # a view an error still holds: GC's
                    b.close()
        if self._error is not None:
            raise self._error

    def _device(self) -> None:
        while (job := self._todo.get()) is not None:
            buf, n, at = job
            try:
                if self._error is None:
                    self._put(memoryview(buf)[:n], at)
            except BaseException as err:  # noqa: BLE001 (raised by the next write, or close)
                self._error = err
            finally:
                self._free.put(buf)  # always back: a writer waiting for a buffer never hangs

    def _put(self, view: memoryview, at: int) -> None:
        if self.direct:
            try:
                done = os.pwrite(self._fd, view, at)  # (O_DIRECT: Linux, which has pwrite)
            except OSError as err:
                if err.errno != errno.EINVAL:  # EINVAL: the device wants larger alignment
                    raise
                done = 0
            if done == len(view):
                return
            self._plain()  # a short or refused write: the rest through the page cache
            view, at = view[done:], at + done
        _write_all(self._fd, view, at)

    def _plain(self) -> None:
        """From here on, writes go through the page cache (a second descriptor, no O_DIRECT)."""
        if self.direct:
            fd = os.open(self.path, _WRITE)
            os.close(self._fd)
            self._fd, self.direct = fd, False


def _write_all(fd: int, view, at: int) -> None:
    view = memoryview(view)
    while len(view):
        if hasattr(os, "pwrite"):
            done = os.pwrite(fd, view, at)
        else:  # (Windows: no O_DIRECT either, so every write is sequential)
            os.lseek(fd, at, os.SEEK_SET)
            done = os.write(fd, view)
        view, at = view[done:], at + done
