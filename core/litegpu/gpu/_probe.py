"""A backend's availability probe beside the GPU executor's import.

A GPU backend's first ``load_delegate`` pays two things that do not depend on each other: the
driver's start (Vulkan's ``vkCreateInstance`` and device enumeration, wgpu's adapter enumeration:
70-450 ms on NVIDIA, in C with the GIL released) and importing ``litegpu.gpu._runtime`` with its op
table (pure Python, 50-90 ms).  :func:`probe_beside_executor` runs the first on a thread while the
caller's thread does the second, so a start pays the longer of the two, not their sum.

The probe must not import litegpu's GPU modules (a module import lock taken in two orders by two
threads is how imports deadlock); the driver binding's own lazy imports are fine (the executor never
imports them).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence

from .._errors import BackendUnavailableError

__all__ = ["probe_beside_executor"]


def probe_beside_executor(probe: Callable[[], str], name: str, failure: str | None = None, *,
                          modules: Sequence[str] = ()) -> str:
    """``probe()`` (the reason the backend cannot run, or ``""``) on a thread named
    ``litegpu-<name>-probe`` while this thread imports ``modules`` (the rest of the backend: its
    device module, which imports the GPU core) and then the GPU executor.  Returns the first import
    failure, else the probe's answer.  A probe that raises answers in words: a
    :class:`BackendUnavailableError`'s message, any other exception as ``"<failure>: <error>"``
    (``failure`` defaults to ``"<name> initialisation failed"``): a broken driver must never break
    ``available_backends()``."""
    answer: list[str] = []

    def run() -> None:
        try:
            answer.append(probe())
        except BackendUnavailableError as e:
            answer.append(str(e))
        except Exception as e:  # noqa: BLE001 - see above
            answer.append(f"{failure or name + ' initialisation failed'}: {e}")

    thread = threading.Thread(target=run, name=f"litegpu-{name}-probe", daemon=True)
    thread.start()
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as e:
                return f"{module} cannot be imported ({e})"
        try:
            from . import _runtime  # noqa: F401 - the shared executor every GPU backend plugs into
        except ImportError as e:
            return f"litegpu's GPU executor cannot be imported ({e})"
    finally:
        thread.join()
    return answer[0] if answer else f"the {name} probe failed without a reason"
