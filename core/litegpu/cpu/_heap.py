"""Keep the CPU interpreter's freed tensors in the process heap between invokes.

Every node returns new numpy arrays and the plan drops each intermediate after its last
reader, so an invoke frees its whole working set.  glibc's allocator then gives the top of
the heap (and every block over its mmap threshold) back to the system, and the next invoke
takes it again, page by page: the kernel zero-fills each 4 KiB page on first touch.  In a
process that runs one model that cost 5-30% of a MediaPipe invoke (measured: 600-2200 minor
page faults per invoke).  Raising glibc's trim and mmap thresholds keeps that memory in the
heap, where the next invoke's allocations find it; the memory stays the process's, as a
runtime's tensor arena would.

A recycling pool of litegpu's own was tried first: it removed the faults as well, but with
a warm heap it ran 4% slower than glibc (which hands out the most recently freed, still
cached, block of any size).  So the allocator stays glibc's, only told not to give memory
back.

:func:`tune_heap` acts once per process, on glibc only, and leaves the allocator alone when
the application set any of glibc's own ``MALLOC_*`` variables or ``LITEGPU_HEAP_TUNING=0``.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["tune_heap", "release_heap", "HEAP_TUNING_ENV"]

HEAP_TUNING_ENV = "LITEGPU_HEAP_TUNING"

# glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to glibc's largest mmap threshold come from the heap; freed heap memory is kept
# up to this much.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 256 << 20

_GLIBC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
               "GLIBC_TUNABLES")

_done: bool | None = None  # None: not tried yet; else whether the thresholds were set
_users = 0  # live interpreters (runtimes) that asked for the tuning


def tune_heap() -> bool:
    """Raise glibc's trim and mmap thresholds (once per process); True when they are set.
    Each call counts one user until :func:`release_heap`."""
    global _done, _users
    _users += 1
    if _done is not None:
        return _done
    _done = False
    if os.environ.get(HEAP_TUNING_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if any(v in os.environ for v in _GLIBC_VARS):
        return False  # the application tunes the allocator itself
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _done


def release_heap() -> None:
    """One user of :func:`tune_heap` is gone (an interpreter was dropped).  When it was the last,
    give the kept memory back to the system (``malloc_trim``): the tuning is scoped to the time
    interpreters are alive, so a service creating and dropping interpreters returns to its
    starting RSS instead of keeping up to the 256 MB trim threshold (issue 19)."""
    global _users
    _users = max(0, _users - 1)
    if _users or not _done:
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
