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

import logging
import re
from typing import Any

__all__ = ["speed_up_type_parsing"]

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

    def fast_parse(csource: str) -> Any:
        if not (isinstance(csource, str) and csource.startswith(_TYPE_PARSE_PREFIX)):
            return parse(csource)  # a cdef: every declaration matters
        full = parser._declarations
        names = set(_IDENT.findall(csource))
        # callers hold ffi's lock (cffi's _typeof_locked), so nothing else reads the dict meanwhile
        parser._declarations = {k: v for k, v in full.items() if k.startswith("typedef ") and k[8:] in names}
        try:
            return parse(csource)
        finally:
            parser._declarations = full

    fast_parse._litegpu_fast = True  # type: ignore[attr-defined]
    parser._parse = fast_parse
    return True
