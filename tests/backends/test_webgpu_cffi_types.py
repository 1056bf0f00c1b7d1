"""The WebGPU backend's faster cffi type parsing (litegpu_webgpu._cffi_types): every type string
must come out exactly as cffi's own parse makes it (same C type, same size), errors included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

cffi = pytest.importorskip("cffi")

ROOT = Path(__file__).resolve().parents[2]

try:
    from litegpu_webgpu._cffi_types import speed_up_type_parsing
except ImportError:
    sys.path.insert(0, str(ROOT / "backends" / "webgpu"))
    from litegpu_webgpu._cffi_types import speed_up_type_parsing

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
