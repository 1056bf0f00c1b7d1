"""The default device's driver opened on its own, without the ICD loader's listing (``DIRECT_ICD``).

The ICD loader's first call starts every installed driver: ocl-icd's ``clGetPlatformIDs``, and its
``clGetDeviceIDs``, ``clGetPlatformInfo`` and ``clCreateContext`` too, load every library that
``/etc/OpenCL/vendors/*.icd`` names and list their platforms.  On the H100 host, where PoCL is
installed beside NVIDIA's driver, PoCL and its LLVM and ICU libraries took 20-35 ms of the 100-135 ms
listing (s13-oclwarm-1, ``docs/performance.md``).

A default start that lists the platforms records, in litegpu's cache, which ICD file named the library
that serves its device, and which of that library's platforms it is.  The next default start opens
only that library (the name the ICD file holds then: nothing else is ever opened), asks it for its
platforms with ``clIcdGetPlatformIDsKHR`` (the function the loader asks every driver for), and makes
the device's context through the platform's dispatch table (:class:`_cl.VendorCalls`).  Every later
call (the device's queries, the queue, programs, buffers, launches) goes through the loader's entry
points, which dispatch through the object's own table and start nothing.  A full listing later in the
process (``list_devices``) starts the loader as before; it opens the same library again, which is the
same loaded copy.

The record applies while the ICD files (paths, sizes, modification times, in the directories the loader
reads: :func:`_icd_dirs`), the loader library and the loaders' variables that choose or order drivers
(:data:`LOADER_ENV_KEYED`) are those it was made with; it is made only for a device of the listing's
first platform (so the default device does not depend on what the other drivers expose), and never
while a variable wraps the calls in layers (:data:`LOADER_ENV_FULL`).  A record
that no longer applies, a
library that does not open, a platform of the cl_khr_icd 2 kind (its dispatch table is the loader's
to fill), or a platform without a device of the recorded kind: the full listing, with the reason at
DEBUG.  Linux only (``dlopen``; the vendors directory).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from . import _cl

__all__ = ["DIRECT_ICD", "Recorded", "recorded", "open_direct"]

log = logging.getLogger("litegpu.opencl")

#: a default start with a record opens the recorded driver alone (False: the loader's full listing,
#: every start).  An A/B switch: ``bench/init_ab.py --set litegpu_opencl._icd.DIRECT_ICD=False``
DIRECT_ICD = True
#: where ocl-icd and the Khronos loader read the installed drivers' ICD files on Linux (``OCL_ICD_VENDORS``,
#: where it names a directory, or ``OPENCL_VENDOR_PATH`` instead)
VENDORS_DIR = "/etc/OpenCL/vendors"
#: the ICD loaders' variables that wrap every call in layers: with one set, the loader's listing decides every
#: start (a driver opened alone would bypass the layers)
LOADER_ENV_FULL = ("OPENCL_LAYERS", "OPENCL_LAYER_PATH")
#: the loaders' variables that choose the ICD directory, add drivers by library name (``OCL_ICD_FILENAMES``,
#: ':'-separated: the Khronos loader's, and the H100 machines' environment sets it), or order or filter the
#: drivers: their values are part of the record's key
LOADER_ENV_KEYED = ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH", "OCL_ICD_FILENAMES", "OCL_ICD_PLATFORM_SORT",
                    "OCL_ICD_DEFAULT_PLATFORM", "OCL_ICD_ASSUME_ICD_EXTENSION")
_FILENAMES = "OCL_ICD_FILENAMES"
#: the record's backend name in the cache (its files ``opencl_icd-*.lgc``, apart from the delegate's ``opencl-*``)
_RECORD, _RECORD_VERSION, _SECTION = "opencl_icd", "3", "icd"
#: cl_khr_icd 2.0's tag in a platform's dispatch table (``clGetPlatformIDs``' slot): the loader fills
#: such a platform's table (``clIcdSetPlatformDispatchDataKHR``)
_ICD2_TAG = 0x4F50454E434C3331
_RTLD_LAZY, _RTLD_NOLOAD = 0x1, 0x4  # glibc's; RTLD_LOCAL is 0 (ocl-icd opens drivers LAZY | LOCAL)
_GET_PLATFORMS = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32))
_EXTENSION_ADDRESS = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_DL: list[Any] = []


def _dl() -> Any:
    """The C library's ``dlopen``, ``dlsym``, ``dladdr``, ``dlclose``, ``dlerror``, typed once."""
    if not _DL:
        c = ctypes.CDLL(None)
        c.dlopen.restype, c.dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
        c.dlsym.restype, c.dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
        c.dladdr.restype, c.dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        c.dlclose.restype, c.dlclose.argtypes = ctypes.c_int, [ctypes.c_void_p]
        c.dlerror.restype, c.dlerror.argtypes = ctypes.c_char_p, []
        _DL.append(c)
    return _DL[0]


class _NotDirect(Exception):
    """Why the recorded driver was not opened on its own (the full listing follows)."""


def _icd_dirs() -> list[str] | None:
    """The directories the ICD loader reads ICD files from: ``OCL_ICD_VENDORS`` where it names a
    directory, else ``OPENCL_VENDOR_PATH``, else :data:`VENDORS_DIR` (ocl-icd's rule), and, for the loader
    pyopencl's wheel bundles (``PYOPENCL_HOME`` set by :func:`_cl._bundled_loader`), its ``.libs`` folder too;
    None where the loader's environment names drivers otherwise (a file, layers)."""
    full = [v for v in LOADER_ENV_FULL if os.environ.get(v)]
    vendors = os.environ.get("OCL_ICD_VENDORS") or os.environ.get("OPENCL_VENDOR_PATH") or VENDORS_DIR
    if not full and not os.path.isdir(vendors):
        full = [f"{vendors} is not a directory"]
    if full:
        log.debug("opencl: %s: the ICD loader lists the drivers on every start", ", ".join(full))
        return None
    dirs = [vendors]
    home = os.environ.get("PYOPENCL_HOME")
    if home and os.path.isdir(os.path.join(home, ".libs")):
        dirs.append(os.path.join(home, ".libs"))
    return dirs


def _icd_files(dirs: list[str]) -> list[str]:
    return sorted(os.path.join(d, e.name) for d in dirs for e in os.scandir(d) if e.name.endswith(".icd"))


def _sources(dirs: list[str]) -> dict[str, str]:
    """Every driver library the loader may open, by where it is named: an ICD file's path (the library is
    its first line, as the loaders read it), or ``OCL_ICD_FILENAMES=<library>`` for an entry of that
    variable."""
    out = {}
    for path in _icd_files(dirs):
        with open(path, encoding="utf-8", errors="replace") as f:
            out[path] = f.readline().strip()
    for lib in filter(None, os.environ.get(_FILENAMES, "").split(os.pathsep)):
        out[f"{_FILENAMES}={lib}"] = lib
    return out


def _installed() -> dict[str, Any] | None:
    """What the loader's listing depends on, as the record's key: the loader library, the variables of
    :data:`LOADER_ENV_KEYED` and every ICD file (path, size, modification time); None where the listing is
    not the installed files' alone (:func:`_icd_dirs`) or not on Linux."""
    if not sys.platform.startswith("linux"):
        return None
    lib = _cl._opencl_loader()  # first: opening pyopencl's loader sets PYOPENCL_HOME (_icd_dirs)
    dirs = _icd_dirs()
    if lib is None or dirs is None:
        return None
    try:
        icds = [[path, (st := os.stat(path)).st_size, st.st_mtime_ns] for path in _icd_files(dirs)]
    except OSError as e:
        log.debug("opencl: the ICD files were not listed (%s)", e)
        return None
    return {"loader": getattr(lib, "_name", None), "icds": icds,
            "env": {v: os.environ.get(v, "") for v in LOADER_ENV_KEYED}}


def _platform_ids(handle: int) -> list[int]:
    """The platforms of the driver opened as ``handle``, by its ``clIcdGetPlatformIDsKHR``."""
    dl = _dl()
    fn = dl.dlsym(handle, b"clIcdGetPlatformIDsKHR")
    if not fn:
        ext = dl.dlsym(handle, b"clGetExtensionFunctionAddress")
        fn = _EXTENSION_ADDRESS(ext)(b"clIcdGetPlatformIDsKHR") if ext else None
    if not fn:
        raise _NotDirect("the driver has no clIcdGetPlatformIDsKHR")
    n, ids = ctypes.c_uint32(0), (ctypes.c_void_p * 8)()
    rc = _GET_PLATFORMS(fn)(8, ids, ctypes.byref(n))
    if rc:
        raise _NotDirect(f"clIcdGetPlatformIDsKHR failed ({rc})")
    return [int(h) for h in ids[:min(n.value, 8)] if h]


def _table_entry(platform: int, slot: int) -> int:
    return ctypes.cast(ctypes.cast(platform, ctypes.POINTER(ctypes.c_void_p))[0], ctypes.POINTER(ctypes.c_void_p))[slot] or 0


class Recorded:
    """The record's place (the cache and key of these installed drivers) and what it holds: ``record``
    (``icd``: the ICD file's path, or the ``OCL_ICD_FILENAMES`` entry, that named the driver; ``platform``:
    the index among its driver's platforms; ``gpu``: the device was a GPU), None where nothing applies yet."""

    __slots__ = ("cache", "key", "record")

    def __init__(self, cache: Any, key: Any, record: dict[str, Any] | None) -> None:
        self.cache, self.key, self.record = cache, key, record

    def store(self, platform: Any, device: Any) -> None:
        """Record ``platform``'s driver (a full listing's default device), when it is the listing's first
        platform's and an ICD file (or ``OCL_ICD_FILENAMES``) names it; failures at DEBUG (the next start
        lists again)."""
        try:
            got = self._describe(platform, device)
            if got is not None and got != self.record:
                self.cache.store(self.key, {_SECTION: json.dumps(got).encode()})
        except Exception as e:  # noqa: BLE001 - an optimisation's record: never the start's failure
            log.debug("opencl: the driver's record was not stored (%s)", e)

    def forget(self, why: BaseException) -> None:
        """The record removed after it failed a start: the driver did not open alone, or the start failed past
        its opening (a context or queue).  The next start lists every driver, and records again."""
        log.debug("opencl: the record failed a start (%s): it is removed", why)
        self.record = None
        try:
            self.cache.remove(self.key)
        except Exception as e:  # noqa: BLE001 - the next start then tries the record once more
            log.debug("opencl: the driver's record was not removed (%s)", e)

    @staticmethod
    def _describe(platform: Any, device: Any) -> dict[str, Any] | None:
        first = _cl.get_platforms()
        if not first or first[0].int_ptr != platform.int_ptr:
            log.debug("opencl: the default device is not the first platform's: not recorded")
            return None
        if _table_entry(platform.int_ptr, 0) == _ICD2_TAG:
            log.debug("opencl: a cl_khr_icd 2 platform: not recorded")
            return None
        dirs = _icd_dirs()
        if dirs is None:
            return None
        dl, info = _dl(), _DlInfo()
        if not dl.dladdr(_table_entry(platform.int_ptr, _cl.DISPATCH_SLOTS["clGetDeviceIDs"]), ctypes.byref(info)):
            return None
        served = dl.dlopen(info.dli_fname, _RTLD_LAZY | _RTLD_NOLOAD)  # the loaded driver, not a new copy
        if not served:
            return None
        try:
            sources = _sources(dirs)
            for name, library in sources.items():
                h = dl.dlopen(library.encode(), _RTLD_LAZY | _RTLD_NOLOAD)
                if not h:
                    continue
                dl.dlclose(h)
                if h == served:
                    gpu = bool(device.type & _cl.DEVICE_TYPE_GPU)
                    if not gpu and len(sources) > 1:
                        # a CPU default beside other drivers: none showed a GPU this time (one may be failing,
                        # or its device not mounted yet), and a record would keep later starts from listing it
                        log.debug("opencl: the default device is no GPU and other drivers are installed: "
                                  "not recorded")
                        return None
                    return {"icd": name, "platform": _platform_ids(served).index(platform.int_ptr), "gpu": gpu}
        finally:
            dl.dlclose(served)
        log.debug("opencl: no ICD file in %s (nor %s) names %s: not recorded", ", ".join(dirs), _FILENAMES,
                  info.dli_fname)
        return None


def recorded(cache: Mapping[str, Any] | None) -> Recorded | None:
    """The default start's record under the ``cache`` options (None: no cache, caching off, ``DIRECT_ICD``
    off, or drivers the loader chooses by its environment).  Empty options are the default cache, on, as
    for the delegate's own entries (``create_delegate`` passes them where the user gave none)."""
    if not DIRECT_ICD or not isinstance(cache, Mapping) or not cache.get("enabled", True):
        return None
    conf = cache
    try:
        installed = _installed()
        if installed is None:
            return None
        from litegpu.cache import DEFAULT_MAX_BYTES, DelegateCache, EntryKey

        # the installed drivers are the key's options: the cache's one canonical form and hash of a key
        key = EntryKey(model_token="opencl-drivers", backend=_RECORD, backend_version=_RECORD_VERSION, device="",
                       driver_version="", options=installed, code="", model_name="(the OpenCL driver's record)")
        store = DelegateCache(conf.get("dir"), max_bytes=conf.get("max_bytes", DEFAULT_MAX_BYTES))
    except Exception as e:  # noqa: BLE001 - the full listing follows
        log.debug("opencl: no driver record (%s)", e)
        return None
    record = None
    try:
        got = store.load(key)
        if got is not None:
            record = json.loads(bytes(got[_SECTION]))
            if not (isinstance(record, dict) and isinstance(record.get("icd"), str)
                    and isinstance(record.get("platform"), int) and isinstance(record.get("gpu"), bool)):
                raise ValueError(f"unexpected record {record!r}")
    except Exception as e:  # noqa: BLE001 - the full listing follows
        log.debug("opencl: the driver's record was not read (%s)", e)
        record = None
    if record is None:
        log.debug("opencl: no driver record for these ICD files: the loader lists every driver")
    return Recorded(store, key, record)


def open_direct(record: Mapping[str, Any]) -> tuple[Any, Any]:
    """The recorded driver's platform and default device (:class:`_cl.Platform` with its
    :class:`_cl.VendorCalls`, :class:`_cl.Device`), the driver opened on its own; ``_NotDirect`` (or a
    :class:`_cl.CLError`) with the reason where it cannot be."""
    icd = record["icd"]
    try:
        library = _sources(_icd_dirs() or []).get(icd)  # only a library the loader may open is opened
    except OSError as e:
        raise _NotDirect(f"the ICD files were not read ({e})") from e
    if library is None:
        raise _NotDirect(f"{icd} is not an installed ICD file")
    dl = _dl()
    handle = dl.dlopen(library.encode(), _RTLD_LAZY)  # kept open for the process, as the loader keeps it
    if not handle:
        raise _NotDirect(f"{library} does not open ({(dl.dlerror() or b'').decode(errors='replace')})")
    platforms = _platform_ids(handle)
    if not record["platform"] < len(platforms):
        raise _NotDirect(f"{library} lists {len(platforms)} platforms now")
    p = platforms[record["platform"]]
    if _table_entry(p, 0) == _ICD2_TAG:
        raise _NotDirect("a cl_khr_icd 2 platform (the loader fills its dispatch table)")
    plat = _cl.Platform(p, _cl.VendorCalls(p))
    try:
        gpus = plat.get_devices(_cl.DEVICE_TYPE_GPU)
    except _cl.CLError:  # DEVICE_NOT_FOUND
        gpus = []
    if not gpus and record["gpu"]:
        raise _NotDirect("the recorded platform has no GPU now")
    log.debug("opencl: the recorded driver %s opened alone (%s)", library, icd)
    return plat, (gpus or plat.get_devices())[0]
