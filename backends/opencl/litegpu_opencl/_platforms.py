"""OpenCL platforms and devices (pyopencl only, no GPU executor): what the availability probe
needs, so that it can run on a thread beside the executor's import
(:func:`litegpu.gpu._probe.probe_beside_executor` forbids litegpu GPU modules in the probe)."""

from __future__ import annotations

from typing import Any

from litegpu import BackendUnavailableError

__all__ = ["list_devices", "describe", "INSTALL_HINT"]

INSTALL_HINT = "install a driver such as PoCL (Debian pocl-opencl-icd) or your GPU vendor's"


def list_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair, GPUs first.  Raises BackendUnavailableError with the reason."""
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # no ICD loader configuration, no platform
        raise BackendUnavailableError(f"no OpenCL platform found ({e}); {INSTALL_HINT}") from e
    if not platforms:
        raise BackendUnavailableError(f"no OpenCL platform found; {INSTALL_HINT}")
    pairs, errors = [], []
    for p in platforms:
        try:
            pairs += [(p, d) for d in p.get_devices()]
        except cl.Error as e:  # a platform without devices raises DEVICE_NOT_FOUND: skip it
            errors.append(f"{p.name.strip()}: {e}")
    if not pairs:
        names = ", ".join(p.name.strip() for p in platforms)
        raise BackendUnavailableError(f"OpenCL platforms exist ({names}) but expose no device"
                                      + (f" ({'; '.join(errors)})" if errors else ""))
    pairs.sort(key=lambda pd: 0 if pd[1].type & cl.device_type.GPU else 1)
    return pairs


def describe(pairs: list[tuple[Any, Any]]) -> str:
    return "; ".join(f"{i}: {d.name.strip()} ({p.name.strip()})" for i, (p, d) in enumerate(pairs))
