"""Output buffers recycled between the nodes of an invoke and across invokes.

Allocating a fresh output for every node costs more than it seems: a buffer of more than
a few hundred KiB comes from ``mmap`` (or from heap memory the allocator returned to the
system at the end of the previous invoke), and the kernel zero-fills every page on first
touch.  On the machines measured that was up to a third of a MediaPipe invoke.

So while a plan runs (:func:`using`), kernels take their output arrays from the plan's
:class:`BufferPool` with :func:`empty`, and the plan gives each intermediate back at its
last use.  A buffer goes back to the pool only when nothing else can see it: the pool
issued it, and neither the array nor its memory owner has any other reference (a view,
a cache, a delegate holding it would all show in the reference counts).  Outside a plan
run (constant folding, kernels called directly), :func:`empty` is ``np.empty``.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["BufferPool", "empty", "using"]

_state = threading.local()
_getrefcount = sys.getrefcount

# Smaller buffers come from malloc's fast free lists anyway.
_MIN_BYTES = 4096


class BufferPool:
    """Free buffers by byte size; see the module docstring for when one is taken back."""

    __slots__ = ("_free", "_issued", "__weakref__")

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}
        # id(owner) -> weak reference, for the buffers handed out and not yet given back
        self._issued: dict[int, weakref.ref] = {}

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        n = dtype.itemsize
        for d in shape:
            n *= d
        if n < _MIN_BYTES:
            return np.empty(shape, dtype)
        free = self._free.get(n)
        owner = free.pop() if free else np.empty(n, np.uint8)
        key = id(owner)
        issued = self._issued
        issued[key] = weakref.ref(owner, lambda _r, k=key, d=issued: d.pop(k, None))
        return owner.view(dtype).reshape(shape)

    def give(self, v: list, i: int) -> None:
        """Drop ``v[i]`` and keep its buffer when it is exclusively ours again."""
        a = v[i]
        v[i] = None
        if type(a) is not np.ndarray:
            return
        owner = a.base
        if type(owner) is not np.ndarray:
            return
        # References to ``a``: the local name and getrefcount's argument.  To ``owner``:
        # a.base, the local name and the argument.  Anything more is someone else's view.
        if _getrefcount(a) != 2 or _getrefcount(owner) != 3:
            return
        ref = self._issued.pop(id(owner), None)
        if ref is None or ref() is not owner:
            return
        self._free.setdefault(owner.nbytes, []).append(owner)

    def clear(self) -> None:
        self._free.clear()
        self._issued.clear()


def empty(shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
    """An uninitialized array, from the running plan's pool when there is one."""
    pool = getattr(_state, "pool", None)
    if pool is None:
        return np.empty(shape, dtype)
    return pool.take(tuple(shape), np.dtype(dtype))


@contextmanager
def using(pool: BufferPool | None) -> Iterator[None]:
    """Make ``pool`` the one :func:`empty` draws from in this thread (nests)."""
    prev = getattr(_state, "pool", None)
    _state.pool = pool
    try:
        yield
    finally:
        _state.pool = prev
