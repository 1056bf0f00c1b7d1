"""The kernel language's parse cache (each top-level definition parsed once per process) gives the
same programs, the same rendered kernels and the same errors as parsing every text whole."""

from __future__ import annotations

import importlib

import pytest
from litegpu.gpu import kernels as K
from litegpu.gpu.lgk.types import KernelTemplateError, precision_types

P = importlib.import_module("litegpu.gpu.lgk.parse")  # the package exports the function ``parse``


def _whole(src: str, name: str, precision: str, half_math: bool = True):
    return P.Parser(P.tokenize(src, name), name, precision_types(precision, half_math),
                    precision_types(precision)).program()


def _render_args():
    """One variant of every kernel, the precisions and the storage-only half taken in turn."""
    out = []
    for i, name in enumerate(K.list_kernels()):
        prec = K.PRECISIONS[i % len(K.PRECISIONS)]
        opts = K.variants(name)[0]
        half_math = prec == "fp32" or i % 4 != 1
        dialect = ("opencl", "glsl", "wgsl")[i % 3]
        if not half_math and dialect == "wgsl":
            dialect = "glsl"
        out.append((name, dialect, prec, opts, half_math))
    return out


@pytest.mark.sweep(every=6)
@pytest.mark.parametrize("case", _render_args(), ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{'half' if c[4] else 'storage'}")
def test_cached_parse_renders_a_kernel_as_the_whole_parse(monkeypatch, case):
    render = K._render.__wrapped__  # the lru_cache would hand back the first result
    name, dialect, prec, opts, half_math = case
    spec = K.kernel_spec(name)
    args = (name, dialect, prec, K._freeze(sorted(spec.resolve(opts).items())), tuple(spec.default_wg), half_math, ())
    cached = render(*args)
    again = render(*args)  # every definition from the cache now
    monkeypatch.setattr(P, "_parse_definitions", lambda *a: None)
    whole = render(*args)
    assert cached == whole, "rendered differently through the parse cache"
    assert again == whole, "rendered differently from the parse cache's copies"


def test_cached_parse_gives_the_same_tree_and_fresh_copies():
    src = ("fn twice(x: real) -> real {\n  return x + x;\n}\n\n"
           "kernel k(a: read real[], b: write real[]) params(n: i32) grid(n) {\n"
           "  let i = gid_x;\n  b[i] = twice(a[i]);\n}\n")
    src = src.replace("let i = gid_x;", "let i: i32 = 0;")
    P._DEFINITIONS.clear()
    first = P.parse(src, "t.lgk", "fp16")
    second = P.parse(src, "t.lgk", "fp16")
    assert len(P._DEFINITIONS) == 2
    assert repr(first) == repr(second) == repr(_whole(src, "t.lgk", "fp16"))
    assert first.funcs["twice"] is not second.funcs["twice"]  # check() annotates the tree it gets
    # another precision binds ``real`` to another type: another entry
    assert repr(P.parse(src, "t.lgk", "fp32")) == repr(_whole(src, "t.lgk", "fp32"))
    assert len(P._DEFINITIONS) == 4


@pytest.mark.parametrize("src", [
    "fn f(x: f32) -> f32 {\n  return x +;\n}\n",  # a syntax error inside a helper
    "fn f(x: f32) -> f32 {\n  return x;\n}\nfn f(y: f32) -> f32 {\n  return y;\n}\n",  # defined twice
    "fn f(x: f32) -> f32 {\n  return x;\n}\n}\n",  # an unbalanced brace
    "fn f(x: f32) -> f32 {\n  return x;\n}\nstray\n",  # text after the last definition
])
def test_errors_are_those_of_the_whole_parse(src):
    with pytest.raises(KernelTemplateError) as whole:
        _whole(src, "e.lgk", "fp32")
    with pytest.raises(KernelTemplateError) as cached:
        P.parse(src, "e.lgk", "fp32")
    assert str(cached.value) == str(whole.value)
