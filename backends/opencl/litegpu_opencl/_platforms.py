"""OpenCL platforms and devices (pyopencl only, no GPU executor): what the availability probe
needs, so that it can run on a thread beside the executor's import
(:func:`litegpu.gpu._probe.probe_beside_executor` forbids litegpu GPU modules in the probe).

Two driver calls cost a start 100-1000 ms on NVIDIA and pyopencl holds the GIL in both
(``bench/cl_context_gil.py`` on an H200: the first ``clGetPlatformIDs`` 209 ms, ``clCreateContext``
170 ms, the other thread stalled throughout): :func:`start_drivers` and :func:`create_context` make
them through ctypes, which releases the GIL, on the very ICD loader pyopencl itself loaded (its
wheel bundles one), so that they overlap the GPU executor's import and the model's read.  Where
the loader cannot be found they return None and pyopencl does the work as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any

from litegpu import BackendUnavailableError

__all__ = ["list_devices", "describe", "INSTALL_HINT", "start_drivers", "create_context", "program_binary"]

_loader: list[Any] = []  # [ctypes.CDLL or None], once per process
_loader_lock = threading.Lock()


def _bundled_loader() -> str | None:
    """The ICD loader a pyopencl wheel bundles (``pyopencl/.libs/libOpenCL-<hash>.so*``), found
    without importing pyopencl (50 ms), so the drivers can start first; None for other builds."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pyopencl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    import glob
    import os

    for where in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(where, ".libs", "libOpenCL*.so*")))
        if found:
            # the bundled loader (pyopencl's patched ocl-icd) looks for the ICDs the wheel ships under
            # PYOPENCL_HOME, which pyopencl's import sets to its folder, and crashes without it
            os.environ["PYOPENCL_HOME"] = os.path.dirname(os.path.abspath(os.path.join(where, "__init__.py")))
            return found[0]
    return None


def _opencl_loader() -> Any:
    """The ICD loader pyopencl uses, through ctypes (None where it cannot be opened).  The loader a
    pyopencl wheel bundles is opened before pyopencl is imported: pyopencl's extension then finds it
    loaded already (the dynamic linker matches its soname), one loader and one set of drivers."""
    with _loader_lock:
        if not _loader:
            path = _bundled_loader()
            if path is None:
                from ._lean_import import prepare

                prepare()  # pyopencl without importlib.metadata
                import pyopencl  # noqa: F401 - loads its ICD loader, found below among the process's mappings

                try:
                    with open("/proc/self/maps") as f:
                        path = next((ln.split()[-1] for ln in f if "libOpenCL" in ln and "/" in ln), None)
                except OSError:  # not Linux
                    pass
            lib = None
            try:
                lib = ctypes.CDLL(path or ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
                lib.clGetPlatformIDs.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)]
                lib.clGetPlatformIDs.restype = ctypes.c_int
                lib.clCreateContext.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p),
                                                ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
                lib.clCreateContext.restype = ctypes.c_void_p
                lib.clGetProgramInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p,
                                                 ctypes.POINTER(ctypes.c_size_t)]
                lib.clGetProgramInfo.restype = ctypes.c_int
            except (OSError, AttributeError):
                lib = None
            _loader.append(lib)
        return _loader[0]


def start_drivers() -> None:
    """The process's first ``clGetPlatformIDs`` (the ICD loader starts every driver) without the GIL,
    before pyopencl's import where its wheel bundles the loader (the caller's thread imports pyopencl
    meanwhile); pyopencl's own enumeration afterwards is quick.  Errors are left to :func:`list_devices`."""
    lib = _opencl_loader()
    if lib is not None:
        lib.clGetPlatformIDs(0, None, ctypes.byref(ctypes.c_uint(0)))


def create_context(device_ptr: int) -> int | None:
    """A ``cl_context`` for one device (pyopencl's ``Device.int_ptr``), made without the GIL: its
    handle, for ``pyopencl.Context.from_int_ptr(handle, retain=False)``; None where the loader is not
    available.  RuntimeError with the OpenCL error code when the driver refuses."""
    lib = _opencl_loader()
    if lib is None:
        return None
    dev = ctypes.c_void_p(device_ptr)
    err = ctypes.c_int(0)
    ctx = lib.clCreateContext(None, 1, ctypes.byref(dev), None, None, ctypes.byref(err))
    if err.value != 0 or not ctx:
        raise RuntimeError(f"clCreateContext failed with OpenCL error {err.value}")
    return int(ctx)


_CL_PROGRAM_NUM_DEVICES = 0x1162
_CL_PROGRAM_BINARY_SIZES = 0x1165
_CL_PROGRAM_BINARIES = 0x1166


def program_binary(program_ptr: int) -> bytes | None:
    """The binary of a program built for one device (pyopencl's ``Program.int_ptr``), read without
    the GIL; None where the loader is not available, the program spans several devices or the driver
    gives none (the caller then asks pyopencl).

    Why: the driver may do real work here, and pyopencl holds the GIL throughout.  PoCL generates
    the code of every kernel when asked for a binary: 13 s of a 40-kernel program on the 2-core CI
    machine, with every other Python thread stalled (``litegpu autoselect``'s clock and the other
    candidates' prepares included)."""
    lib = _opencl_loader()
    if lib is None:
        return None
    prog = ctypes.c_void_p(program_ptr)
    n = ctypes.c_uint(0)
    if lib.clGetProgramInfo(prog, _CL_PROGRAM_NUM_DEVICES, ctypes.sizeof(n), ctypes.byref(n), None) or n.value != 1:
        return None
    size = ctypes.c_size_t(0)
    if lib.clGetProgramInfo(prog, _CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None):
        return None
    if not size.value:
        return None
    buf = ctypes.create_string_buffer(size.value)
    ptrs = (ctypes.c_char_p * 1)(ctypes.cast(buf, ctypes.c_char_p))
    if lib.clGetProgramInfo(prog, _CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None):
        return None
    return buf.raw


INSTALL_HINT = "install a driver such as PoCL (Debian pocl-opencl-icd) or your GPU vendor's"


def list_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair, GPUs first.  Raises BackendUnavailableError with the reason."""
    from ._lean_import import prepare

    prepare()  # pyopencl without importlib.metadata
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
