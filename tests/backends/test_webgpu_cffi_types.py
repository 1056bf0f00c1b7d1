"""The WebGPU backend's faster cffi type parsing (litegpu_webgpu._cffi_types): every type string
must come out exactly as cffi's own parse makes it (same C type, same size), errors included; and
a header's declaration table restored from litegpu's cache must be cffi's own parse of it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

cffi = pytest.importorskip("cffi")

ROOT = Path(__file__).resolve().parents[2]

try:
    from litegpu_webgpu._cffi_types import cached_header_cdef, speed_up_type_parsing
except ImportError:
    sys.path.insert(0, str(ROOT / "backends" / "webgpu"))
    from litegpu_webgpu._cffi_types import cached_header_cdef, speed_up_type_parsing

_CDEF = """
typedef struct Foo { int a; double b; } Foo;
typedef Foo * FooPtr;
typedef struct Bar * BarHandle;
typedef enum Mode { MODE_A = 0, MODE_B = 1 } Mode;
typedef void (*Callback)(Foo const * f, Mode m, void * user);
typedef uint32_t Flags;
""" + "".join(f"typedef struct Unused{i} {{ int x; }} Unused{i};\n" for i in range(200))

# the shapes wgpu-py uses (pointers, open and sized arrays, const, callbacks) and a few more
_TYPES = ["Foo *", "Foo[]", "Foo[3]", "Foo", "FooPtr", "BarHandle[]", "Foo const *", "struct Foo *",
          "Mode", "Flags *", "uint8_t *", "char []", "uint32_t []", "intptr_t", "Callback",
          "void(Foo const *, Mode, void *)", "void(Mode, FooPtr, void *, void *)", "Foo * ", "Unused7[2]"]


def _ffi(fast: bool) -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    if fast:
        assert speed_up_type_parsing(ffi)
    return ffi


def _described(ffi: cffi.FFI, cdecl: str) -> tuple[str, int | None]:
    # a function type is what ffi.callback takes (wgpu-py's callbacks); typeof refuses it
    t = ffi.typeof(ffi.callback(cdecl, lambda *a: None)) if cdecl.startswith("void(") else ffi.typeof(cdecl)
    try:
        size = ffi.sizeof(t)
    except (ValueError, TypeError, cffi.FFIError):  # function types and open arrays have no size
        size = None
    return ffi.getctype(t), size


@pytest.mark.parametrize("cdecl", _TYPES)
def test_same_types_as_cffi(cdecl: str) -> None:
    assert _described(_ffi(True), cdecl) == _described(_ffi(False), cdecl)


def test_unknown_names_still_fail_and_cdef_still_works() -> None:
    fast = _ffi(True)
    with pytest.raises(cffi.CDefError):
        fast.typeof("NoSuchType *")
    fast.cdef("typedef struct Late { Foo f; } Late;")  # a cdef after the speed-up sees everything
    assert fast.sizeof("Late") == fast.sizeof("Foo")
    assert speed_up_type_parsing(fast)  # idempotent


def test_wgpu_binding_types_unchanged() -> None:
    """The type strings a WebGPU prepare uses, on wgpu-py's own binding, against an unpatched FFI of
    the same header."""
    pytest.importorskip("wgpu")
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, get_wgpu_header
    except Exception as e:  # noqa: BLE001 - no wgpu-native library here
        pytest.skip(f"wgpu-native cannot be loaded: {e}")
    assert speed_up_type_parsing(ffi)
    plain = cffi.FFI()
    plain.cdef(get_wgpu_header())
    for cdecl in ["WGPUDeviceDescriptor *", "WGPUBindGroupEntry[]", "WGPUCommandBuffer[1]", "WGPUFeatureName[]",
                  "WGPUChainedStruct * ", "WGPUStringView *", "WGPUSubmissionIndex *",
                  "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
                  "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)"]:
        assert _described(ffi, cdecl) == _described(plain, cdecl), cdecl


# --------------------------------------------------------------------------- the header's cdef, cached

# long enough to count as a header (the cache leaves short cdefs to cffi), in few typedefs: cffi's own
# parse of each type string re-declares every typedef name of the FFI (1,400 typedefs made this test 14 s, 450 take 3 s)
_HEADER = _CDEF + "".join(f"typedef struct Pad{i} {{ int x[{i + 1}]; Foo f; double long_member_names_add_text_but_no_typedef_{i}[2]; "
                          f"float and_a_second_long_member_name_for_the_same_reason_{i}; }} Pad{i};\n" for i in range(250))
_HEADER_TYPES = [*_TYPES, "Pad3", "Pad249 *", "struct Pad17[2]"]


def _header_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    with cached_header_cdef():
        ffi.cdef(_HEADER)
    return ffi


def test_cached_header_cdef_is_cffis_own_parse(tmp_path, monkeypatch, caplog) -> None:
    """First parse: stored in the cache folder; second: restored from it, without pycparser, and every
    type (sizes, C names, functions, callbacks) is what cffi's own parse of the header gives."""
    import logging

    from litegpu.cache import DelegateCache

    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path))
    plain = cffi.FFI()
    plain.cdef(_HEADER)
    first = _header_ffi()
    assert [e.backend for e in DelegateCache(tmp_path).entries()] == ["webgpu-cdef"]
    parses = []
    real = cffi.cparser.Parser._internal_parse
    monkeypatch.setattr(cffi.cparser.Parser, "_internal_parse", lambda self, src: parses.append(1) or real(self, src))
    with caplog.at_level(logging.DEBUG, logger="litegpu"):
        again = _header_ffi()
    assert parses == [] and not [r for r in caplog.records if "cffi declarations" in r.getMessage()]
    # the fast type parsing is in place from right after the header, parsed or restored: the rest of
    # wgpu-py's import parses C types at once (checked below to give cffi's own types)
    assert first._parser._parse._litegpu_fast and again._parser._parse._litegpu_fast
    assert again._cdefsources == [_HEADER]
    for cdecl in _HEADER_TYPES:
        assert _described(again, cdecl) == _described(plain, cdecl) == _described(first, cdecl), cdecl
    assert sorted(again._parser._declarations) == sorted(plain._parser._declarations)
    again.cdef("typedef struct After { Pad3 p; } After;")  # later cdefs parse as usual
    assert again.sizeof("After") == plain.sizeof("Pad3")


def test_cached_header_cdef_refuses_anything_but_cffi_types(tmp_path, monkeypatch, caplog) -> None:
    """An entry whose pickle names any other class (code to run) is refused, and the header is parsed
    as usual; a cdef that is not a whole header is never cached."""
    import logging
    import os
    import pickle

    from litegpu.cache import DelegateCache
    from litegpu_webgpu import _cffi_types

    monkeypatch.setenv("LITEGPU_CACHE_DIR", str(tmp_path))
    evil = pickle.dumps({k: os.getcwd for k in _cffi_types._PARSER_STATE})  # a function: code to run
    DelegateCache(tmp_path).store(_cffi_types._cdef_key(_HEADER), {"parser": evil})
    with caplog.at_level(logging.DEBUG, logger="litegpu"):
        ffi = _header_ffi()
    assert any("not a cffi type class" in r.getMessage() for r in caplog.records)
    plain = cffi.FFI()
    plain.cdef(_HEADER)
    assert _described(ffi, "Pad3") == _described(plain, "Pad3")  # parsed by cffi after the refusal
    small = cffi.FFI()
    with cached_header_cdef():
        small.cdef(_CDEF)
    assert small.sizeof("Foo") == 16 and len(DelegateCache(tmp_path).entries()) == 1  # the header's, rewritten


def test_the_native_starts_instance_structs_are_what_wgpu_py_passes(monkeypatch):
    """The bytes the native start passes to ``wgpuCreateInstance`` through ctypes
    (``_adapters.instance_structs``, stored by the header's digest) are the very struct wgpu-py's
    ``set_instance_extras`` builds for the same backends, its other defaults included; the descriptor
    is empty but for its chain pointer, and the enumeration's filter has the same backends."""
    pytest.importorskip("wgpu")
    from litegpu_webgpu import _adapters
    from wgpu.backends.wgpu_native import extras as wgpu_extras
    from wgpu.backends.wgpu_native._ffi import ffi, lib

    seen = {}

    def capture(extras=None):  # instead of making the (process-wide) instance
        seen["extras"] = bytes(ffi.buffer(extras))

    monkeypatch.setattr(wgpu_extras, "get_wgpu_instance", capture)
    wgpu_extras.set_instance_extras(backends=["Vulkan", "Metal", "DX12"])
    mine = _adapters.instance_structs(ffi, lib)
    assert mine["extras"] == seen["extras"]
    assert mine["descriptor"] == bytes(ffi.sizeof("WGPUInstanceDescriptor"))
    assert int(mine["descriptor_next"]) == ffi.offsetof("WGPUInstanceDescriptor", "nextInChain")
    raw_options, raw_extras = ffi.from_buffer(bytearray(mine["options"])), ffi.from_buffer(bytearray(mine["extras"]))
    options = ffi.cast("WGPUInstanceEnumerateAdapterOptions *", raw_options)
    assert options.backends == ffi.cast("WGPUInstanceExtras *", raw_extras).backends == 1 | 4 | 8
    assert options.nextInChain == ffi.NULL


def test_the_native_device_requests_structs_are_laid_out_as_wgpu_pys():
    """The structs the native device request (``_adapters._native_device``) passes by value through
    ctypes (``WGPURequestDeviceCallbackInfo``, ``WGPUStringView``) have wgpu.h's layout as wgpu-py's
    binding has it (else the request would go the slow way, through wgpu-py, unnoticed), and the
    stored layout names the features wgpu-py's request asks for by the same enum values."""
    pytest.importorskip("wgpu")
    import ctypes

    from litegpu_webgpu import _adapters
    from wgpu.backends.wgpu_native._ffi import ffi, lib

    layout = _adapters.device_layout(ffi, lib)
    types = _adapters._ctypes_types()
    info, view = types["CallbackInfo"], types["StringView"]
    assert layout["callback_info"] == [ctypes.sizeof(info), *(getattr(info, f).offset
                                                              for f in _adapters._CALLBACK_INFO_FIELDS)]
    assert layout["string_view"] == [ctypes.sizeof(view), view.data.offset, view.length.offset]
    assert layout["enum_bytes"] == 4
    assert layout["enums"]["features"] == [lib.WGPUFeatureName_ShaderF16, lib.WGPUFeatureName_TimestampQuery]
    assert _adapters.DEVICE_FEATURES == ("shader-f16", "timestamp-query")
