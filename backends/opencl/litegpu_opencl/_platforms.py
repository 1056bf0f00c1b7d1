"""OpenCL platforms and devices (no GPU executor): what the availability probe needs, so that it can
run on a thread beside the executor's import (:func:`litegpu.gpu._probe.probe_beside_executor` forbids
litegpu GPU modules in the probe), and the ICD loader every OpenCL call goes through.

The first ``clGetPlatformIDs`` (where the ICD loader starts every driver) costs a start 100-500 ms on
NVIDIA: :func:`start_drivers` makes it on a thread through ctypes (:mod:`litegpu_opencl._cl`), which
releases the GIL, so that it overlaps the GPU executor's import and the model's read.
"""

from __future__ import annotations

from typing import Any

from litegpu import BackendUnavailableError

__all__ = ["list_devices", "describe", "INSTALL_HINT", "start_drivers"]

def start_drivers() -> None:
    """The process's first ``clGetPlatformIDs`` (the ICD loader starts every driver: 120-490 ms on
    NVIDIA) without the GIL, on the caller's thread.  Errors are left to :func:`list_devices`."""
    from . import _cl

    try:
        _cl.get_platforms()
    except _cl.CLError:
        pass


INSTALL_HINT = "install a driver such as PoCL (Debian pocl-opencl-icd) or your GPU vendor's"


def list_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair (:mod:`litegpu_opencl._cl` objects), GPUs first.  Raises
    BackendUnavailableError with the reason."""
    from . import _cl

    try:
        platforms = _cl.get_platforms()
    except _cl.CLError as e:  # no ICD loader (configuration), no platform
        raise BackendUnavailableError(f"no OpenCL platform found ({e}); {INSTALL_HINT}") from e
    if not platforms:
        raise BackendUnavailableError(f"no OpenCL platform found; {INSTALL_HINT}")
    pairs, errors = [], []
    for p in platforms:
        try:
            pairs += [(p, d) for d in p.get_devices()]
        except _cl.CLError as e:  # a platform without devices raises DEVICE_NOT_FOUND: skip it
            errors.append(f"{p.name.strip()}: {e}")
    if not pairs:
        names = ", ".join(p.name.strip() for p in platforms)
        raise BackendUnavailableError(f"OpenCL platforms exist ({names}) but expose no device"
                                      + (f" ({'; '.join(errors)})" if errors else ""))
    pairs.sort(key=lambda pd: 0 if pd[1].type & _cl.DEVICE_TYPE_GPU else 1)
    return pairs


def describe(pairs: list[tuple[Any, Any]]) -> str:
    return "; ".join(f"{i}: {d.name.strip()} ({p.name.strip()})" for i, (p, d) in enumerate(pairs))
