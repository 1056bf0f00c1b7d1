"""The garbage collector paused while litegpu builds a large graph of objects in one go.

A warm start reads a model (thousands of small objects), imports the GPU core and plans the model:
CPython's cyclic collector runs every 700 net allocations, and ran 72 times (once over every object
of the process) in one warm prepare of pose_landmark_full, 10-15% of its CPU time, finding 22
cycles.  :func:`gc_paused` switches it off for such a step and back on after (the objects made in
between are counted, so the next collection after it runs as usual).  Nested and concurrent uses
count: the collector comes back when the last one ends, and only when it was on at the first.

Coming back, the collector would scan every object made in the block at its next allocation: one
young-generation pass over tens of thousands of objects (9-13 ms of a warm vulkan prepare of
pose_landmark_full on the CI-class machine, 23-52 ms of an opencl one, whose pyopencl import makes
more).  Those objects are mostly long-lived (modules, classes, the model, the plan), so the block's
end moves them to the oldest generation unscanned (``gc.freeze()`` then ``gc.unfreeze()``, which puts
the frozen objects into the oldest generation): cycles among them are still found, by the next full
collection.  Not done when the process keeps frozen objects of its own (``gc.get_freeze_count()``,
e.g. a server that froze its heap before forking): unfreezing would hand those back to the collector.
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

#: A/B switch (``bench/init.py --set litegpu._gc.PROMOTE=False``): False leaves the objects made in a
#: paused block young (the next collection scans them all)
PROMOTE = True


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
    ok = False
    try:
        yield
        ok = True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                # only after a block that finished: a failed prepare's objects (cycles through its traceback
                # among them) stay young, so the next young collection frees them
                if ok and PROMOTE and not gc.get_freeze_count():
                    gc.freeze()  # every tracked object -> the permanent generation,
                    gc.unfreeze()  # -> and from there into the oldest one, none scanned
                gc.enable()


def without_gc(fn: _F) -> _F:
    """``fn`` run inside :func:`gc_paused`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with gc_paused():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
