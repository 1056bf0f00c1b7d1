"""Faster first use of each C type in wgpu-py's cffi binding (about 2 s of every WebGPU start).

wgpu-py loads wgpu-native in cffi's in-line ABI mode: ``ffi.cdef`` of the whole ``wgpu.h`` at import,
and every C type string it then uses (``ffi.new("WGPUDeviceDescriptor *")`` and about 45 others
on a device request, a pipeline, a bind group, ...) is parsed by pycparser the first time in the
process.  cffi prefixes each such parse with one ``typedef int NAME;`` line per typedef it knows
(about 4,800 for ``wgpu.h``), so that pycparser can tell type names from identifiers: each first
use costs 50-70 ms on a 2-core machine, about 2 s of a WebGPU start on lavapipe, a warm one
included (measured with cProfile: ``cffi/cparser.py`` ``parse_type`` under ``request_device``,
``create_bind_group``, ``create_shader_module``...).

Only the typedef names that occur in the parsed string can change how it parses, so
:func:`speed_up_type_parsing` hands cffi's parser just those while it parses a type string; the
resulting types are cffi's own (its parser builds them from its full declarations afterwards).
The header's own ``cdef`` is untouched.  Anything unexpected in cffi's internals leaves cffi as it
is (logged at DEBUG): the speed-up is never needed for correctness.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import pickle
import re
import struct
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["speed_up_type_parsing", "cached_header_cdef", "cached_instance_layout", "store_instance_layout"]

log = logging.getLogger("litegpu")

_IDENT = re.compile(r"[A-Za-z_]\w*")
# cffi's parse_type wraps the type string as the one parameter of a dummy function
_TYPE_PARSE_PREFIX = "void __dummy("


def speed_up_type_parsing(ffi: Any) -> bool:
    """Make ``ffi``'s parses of single type strings see only the typedefs they name.  Idempotent;
    returns whether the speed-up is in place."""
    parser = getattr(ffi, "_parser", None)
    parse = getattr(parser, "_parse", None)
    decls = getattr(parser, "_declarations", None)
    if parse is None or not isinstance(decls, dict):
        log.debug("webgpu: cffi's parser has no _parse/_declarations; C type parsing left as it is")
        return False
    if getattr(parse, "_litegpu_fast", False):
        return True

    # typedef name -> its declarations key, for the declarations table as it was when made (a later
    # cdef adds to it: rebuilt then); walking the ~4,800 keys at every parse was 110 ms of a start
    index: dict[str, str] = {}
    indexed: list[Any] = [None, -1]  # (the table, its size) the index is of

    def fast_parse(csource: str) -> Any:
        if not (isinstance(csource, str) and csource.startswith(_TYPE_PARSE_PREFIX)):
            return parse(csource)  # a cdef: every declaration matters
        full = parser._declarations
        if indexed[0] is not full or indexed[1] != len(full):
            index.clear()
            index.update((k[8:], k) for k in full if k.startswith("typedef "))
            indexed[:] = [full, len(full)]
        keys = [index[n] for n in set(_IDENT.findall(csource)) if n in index]
        # callers hold ffi's lock (cffi's _typeof_locked), so nothing else reads the dict meanwhile
        parser._declarations = {k: full[k] for k in keys}
        try:
            return parse(csource)
        finally:
            parser._declarations = full

    fast_parse._litegpu_fast = True  # type: ignore[attr-defined]
    parser._parse = fast_parse
    return True


# --------------------------------------------------------------------------- the header's cdef, cached
#
# ``import wgpu.backends.wgpu_native`` runs ``ffi.cdef`` over the whole ``wgpu.h`` (108 KB): pycparser
# parses it into cffi's declaration table, 195 ms of CPU on the 2-core CI machine at every start,
# warm ones included (about a sixth of a warm WebGPU prepare there).  The table depends only on the
# header's text and cffi's version: :func:`cached_header_cdef` keeps it in litegpu's cache folder
# (the serialization cache's rules: private folder, checksums, atomic writes) and restores it in
# about 7 ms, the header text itself is recorded by cffi as usual.  It is unpickled with a loader
# that admits cffi's type classes only.

#: a cdef at least this long is a header worth caching (wgpu.h: 108 KB); small ones parse quickly
_HEADER_CHARS = 50_000
_CDEF_RECORD = "webgpu-cdef"  # the cache "backend" name of these entries
_PARSER_STATE = ("_declarations", "_included_declarations", "_anonymous_counter", "_int_constants",
                 "_recomplete", "_uses_new_feature")


class _TypesOnly(pickle.Unpickler):
    """Unpickles cffi's declaration table: cffi's model classes and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "cffi.model":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a cffi type class")


def _cdef_key(csource: str) -> Any:
    import cffi
    from litegpu.cache import EntryKey

    digest = hashlib.sha256(csource.encode("utf-8", "surrogatepass")).hexdigest()
    return EntryKey(model_token=f"sha256:{digest}", backend=_CDEF_RECORD, backend_version="1", device="",
                    driver_version="", options={"cffi": cffi.__version__, "python": sys.version.split()[0],
                                                "pickle": pickle.HIGHEST_PROTOCOL},
                    code=f"cffi {cffi.__version__}")


def _restore(ffi: Any, csource: str, blob: bytes) -> bool:
    state = _TypesOnly(io.BytesIO(blob)).load()
    if not isinstance(state, dict) or set(state) != set(_PARSER_STATE):
        return False
    with ffi._lock:  # what FFI._cdef does around its parse
        ffi._cdef_version = object()
        ffi._parser.__dict__.update(state)
        ffi._cdefsources.append(csource)
        finish = ffi._parser._recomplete
        if finish:
            ffi._parser._recomplete = []
            for tp in finish:
                tp.finish_backend_type(ffi, finish)
    return True


@contextlib.contextmanager
def cached_header_cdef() -> Iterator[None]:
    """Inside the block, a new FFI's first ``cdef`` of a whole header (wgpu-py's import of wgpu.h)
    comes from litegpu's cache when stored there, and is stored after a parse otherwise.  Any other
    cdef, and any failure of the cache, goes to cffi as usual (logged at DEBUG)."""
    try:
        from cffi import FFI
    except ImportError:
        yield
        return
    original = FFI.cdef

    def cdef(self: Any, csource: Any, override: bool = False, packed: bool = False, pack: Any = None) -> Any:
        if (not isinstance(csource, str) or len(csource) < _HEADER_CHARS or override or packed or pack
                or self._cdefsources or self._parser._declarations):
            return original(self, csource, override=override, packed=packed, pack=pack)
        try:
            from litegpu.cache import DelegateCache

            store, key = DelegateCache(), _cdef_key(csource)
            got = store.load(key)
            if got is not None and "parser" in got and _restore(self, csource, got["parser"]):
                # before the binding's import goes on: its first type parses (ffi.new, ffi.callback
                # at module level, the instance's descriptors) cost 280 ms on the CI machine without
                speed_up_type_parsing(self)
                return None
        except Exception as e:  # noqa: BLE001 - the cache is never needed for correctness
            log.debug("webgpu: the cached cffi declarations were not used (%s)", e)
            store = None
        original(self, csource)
        speed_up_type_parsing(self)
        if store is not None:
            try:
                state = {k: getattr(self._parser, k) for k in _PARSER_STATE}
                store.store(key, {"parser": pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)})
            except Exception as e:  # noqa: BLE001
                log.debug("webgpu: the cffi declarations were not cached (%s)", e)
        return None

    FFI.cdef = cdef
    try:
        yield
    finally:
        FFI.cdef = original



# --------------------------------------------------------------------------- wgpu's instance structs
#
# The native start (``_adapters._native_start``) makes wgpu's instance through ctypes before wgpu-py
# and cffi are imported, and requests the default device (``_adapters._native_device``): it needs the
# bytes of three C structs and the device request's layout as wgpu-py's binding has them for this
# header (``_adapters.instance_structs``), which the first start stores here by the header's digest; a
# new wgpu-py (another header) has no record until its first start stores one.

_LAYOUT_RECORD = "webgpu-instance-layout"
#: "device": the native device request's layout (``_adapters.device_layout``, JSON), since record "2"
_LAYOUT_SECTIONS = ("extras", "descriptor", "descriptor_next", "options", "device")


def _layout_key(csource: str) -> Any:
    from litegpu.cache import EntryKey

    digest = hashlib.sha256(csource.encode("utf-8", "surrogatepass")).hexdigest()
    return EntryKey(model_token=f"sha256:{digest}", backend=_LAYOUT_RECORD, backend_version="2", device="",
                    driver_version="", options={"pointer_bytes": struct.calcsize("P")}, code="")


def cached_instance_layout(csource: str) -> dict[str, bytes] | None:
    """The instance structs' bytes stored for this header text, or None."""
    from litegpu.cache import DelegateCache

    got = DelegateCache().load(_layout_key(csource))
    if got is None or set(got) != set(_LAYOUT_SECTIONS):
        return None
    return {k: bytes(v) for k, v in got.items()}


def store_instance_layout(csource: str, sections: dict[str, bytes]) -> None:
    """Keep ``sections`` (``_adapters.instance_structs``) for this header text; failures logged at DEBUG."""
    from litegpu.cache import DelegateCache

    try:
        DelegateCache().store(_layout_key(csource), sections)
    except Exception as e:  # noqa: BLE001 - the next start takes wgpu-py's way again
        log.debug("webgpu: the instance's layout was not cached (%s)", e)
