"""The garbage collector paused while litegpu builds a large graph of objects in one go.

A warm start reads a model (thousands of small objects), imports the GPU core and plans the model:
CPython's cyclic collector runs every 700 net allocations, and ran 72 times (once over every object
of the process) in one warm prepare of pose_landmark_full, 10-15% of its CPU time, finding 22
cycles.  :func:`gc_paused` switches it off for such a step and back on after (the objects made in
between are counted, so the next collection after it runs as usual).  Nested and concurrent uses
count: the collector comes back when the last one ends, and only when it was on at the first.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["gc_paused", "without_gc"]

_lock = threading.Lock()
_depth = 0
_restore = False

_F = TypeVar("_F", bound=Callable[..., Any])


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block (see the module docstring)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            if _restore:
                gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()


def without_gc(fn: _F) -> _F:
    """``fn`` run inside :func:`gc_paused`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with gc_paused():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
