"""Single-op models for kernel tests: build one op with ModelBuilder, run it in LiteRT and in litegpu.

``check(op, ins, ...)`` builds a model whose inputs are ``ins`` (graph inputs, or constants
for ``Const(...)``), runs LiteRT's reference kernels (or its builtin kernels with
``reference=False`` for ops the reference resolver lacks) and litegpu, and compares:
float outputs by relative error (returned), everything else exactly.

litegpu runs through ``litegpu.Interpreter`` when it exists.  Until then a minimal driver
runs the CPU kernels straight from the builder's IR (same prepare/run contract), which also
checks each kernel's promise: the output shapes prepare announces are the shapes run returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from litegpu.testing import ModelBuilder, assert_allclose_rel
from litegpu.testing import run_litert as _run_litert_ref


def run_litert(data: bytes, feeds: list[np.ndarray], *, reference: bool = True) -> list[np.ndarray]:
    """LiteRT's answer: reference kernels, or (``reference=False``) its optimized builtin kernels
    *without* the XNNPACK delegate, whose shortcuts (it ignores CONCATENATION's fused activation,
    reads a STRIDED_SLICE end of 0 as "to the end") are not LiteRT's kernel semantics."""
    if reference:
        return _run_litert_ref(data, feeds, reference=True)
    from ai_edge_litert import interpreter as litert
    from litegpu.testing._oracle import _run
    it = litert.Interpreter(model_content=bytes(data), num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return _run(it, feeds)

__all__ = ["Const", "In", "OracleCannotRead", "check", "build", "run_ours", "litert_error", "ref_ok", "record", "rand"]

# Highest version of each op that LiteRT 2.3's BUILTIN_REF resolver accepts (probed: a model with
# version N loads or not); None: the op is only in the builtin (optimized) resolver.  Above these,
# tests compare with LiteRT's builtin kernels instead.
REF_MAX: dict[str, int | None] = {
    "ADD": 5, "MUL": 7, "ABS": 3, "SIN": 1, "COS": 1, "CEIL": None, "ROUND": None, "ELU": None,
    "GELU": 2, "SOFTMAX": 3, "ARG_MAX": 2, "ARG_MIN": 2, "SQUEEZE": 1, "TRANSPOSE": 8,
    "STRIDED_SLICE": 4, "TILE": 2, "DEPTH_TO_SPACE": 1, "RANGE": 1,
}


def ref_ok(op: str, version: int = 1) -> bool:
    """Whether LiteRT's reference resolver has ``op`` at ``version``."""
    if op not in REF_MAX:
        return True
    m = REF_MAX[op]
    return m is not None and version <= m


_RNG = np.random.default_rng(1234)


def rand(shape, dtype: str = "float32", lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    """Random test data: uniform floats in [lo, hi), integers in [lo, hi], booleans."""
    if dtype == "bool":
        return _RNG.integers(0, 2, shape).astype(bool)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return _RNG.uniform(lo, hi, shape).astype(dt)
    info = np.iinfo(dt)
    return _RNG.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, shape).astype(dt)


@dataclass
class Const:
    """An op input stored as a constant tensor in the model."""

    value: np.ndarray
    quant: Any = None


@dataclass
class In:
    """A graph input with an explicit quantization."""

    value: np.ndarray
    quant: Any = None


def _arr(v) -> np.ndarray:
    return np.asarray(v.value if isinstance(v, (Const, In)) else v)


def build(op: str, ins: list, out_specs: list[tuple[tuple[int, ...], str, Any]], version: int = 1,
          **options: Any) -> tuple[bytes, list[np.ndarray]]:
    """(model bytes, graph input arrays) for a one-op model; ``None`` in ``ins`` is an omitted input."""
    b = ModelBuilder()
    idx, feeds = [], []
    for i, v in enumerate(ins):
        if v is None:
            idx.append(-1)
            continue
        a = _arr(v)
        dt = "string" if a.dtype.kind in "OUS" else a.dtype.name
        if isinstance(v, Const):
            idx.append(b.const(f"c{i}", a, quant=v.quant, dtype=dt))
        else:
            idx.append(b.input(f"x{i}", a.shape, dt, quant=v.quant if isinstance(v, In) else None))
            feeds.append(a)
    outs = [b.tensor(f"y{j}", s, d, quant=q) for j, (s, d, q) in enumerate(out_specs)]
    b.op(op, idx, outs, version=version, **options)
    b.output(*outs)
    return b.build(), feeds


def _interpreter_available() -> bool:
    import litegpu
    return hasattr(litegpu, "Interpreter")


def run_ours(op: str, ins: list, out_specs, version: int = 1, **options: Any) -> list[np.ndarray]:
    """litegpu's answer: end to end when the Interpreter exists, else the kernel driven directly."""
    if _interpreter_available():
        from litegpu.testing import run_litegpu
        data, feeds = build(op, ins, out_specs, version, **options)
        return run_litegpu(data, feeds)
    return _drive_kernel(op, ins, out_specs, version, options)


def _drive_kernel(op: str, ins: list, out_specs, version: int, options: dict,
                  unknown_shapes: bool = False) -> list[np.ndarray]:
    """Run the op's CPU kernel on the model as ``litegpu._reader`` reads it (options with schema
    defaults, quantization, constants), checking the kernel contract on the way.

    ``unknown_shapes``: prepare sees no shape for non-constant inputs (as after an upstream op
    with a data-dependent output shape), so the kernel must plan at run."""
    from litegpu._reader import read_model
    from litegpu.cpu._registry import CPU_KERNELS, NodeContext, TensorSpec, kernel_dtype

    data, _ = build(op, ins, out_specs, version, **options)
    sg = read_model(data).main
    node = sg.operators[0]
    specs: list[TensorSpec | None] = []
    arrays: list[np.ndarray | None] = []
    for ti, v in zip(node.inputs, ins, strict=True):
        if v is None:
            specs.append(None)
            arrays.append(None)
            continue
        t = sg.tensors[ti]
        a = _arr(v)
        if a.dtype.kind in "US":  # strings travel as object arrays of bytes
            a = np.array([x.encode() if isinstance(x, str) else bytes(x) for x in a.reshape(-1)],
                         dtype=object).reshape(a.shape)
        const = isinstance(v, Const)
        shape = None if unknown_shapes and not const else tuple(a.shape)
        specs.append(TensorSpec(ti, t.name, t.dtype, shape, t.quantization, a if const else None))
        arrays.append(a)
    outs = [TensorSpec(ti, sg.tensors[ti].name, sg.tensors[ti].dtype, tuple(sg.tensors[ti].shape),
                       sg.tensors[ti].quantization) for ti in node.outputs]
    dtype = kernel_dtype(node, specs, outs)
    prep = CPU_KERNELS.lookup(node.name, dtype, node.version)
    if prep is None:
        raise LookupError(CPU_KERNELS.explain_missing(node.name, dtype, node.version))
    prepared = prep(NodeContext(node, specs, outs))
    assert len(prepared.output_shapes) == len(outs), f"{op}: prepare gave {len(prepared.output_shapes)} shapes"
    res = prepared.run(arrays)
    assert len(res) == len(outs), f"{op}: {len(res)} outputs for {len(outs)}"
    for r, shp, o in zip(res, prepared.output_shapes, outs, strict=True):
        assert isinstance(r, np.ndarray), f"{op}: run returned {type(r)}"
        if shp is not None:
            assert tuple(r.shape) == tuple(shp), f"{op}: prepare said {shp}, run gave {r.shape}"
        want = np.dtype(object) if o.dtype == "string" else np.dtype(o.dtype)
        assert r.dtype == want, f"{op}: output dtype {r.dtype}, declared {o.dtype}"
        assert not any(x is not None and np.shares_memory(r, x) for x in arrays if isinstance(x, np.ndarray)), \
            f"{op}: an output shares memory with an input"
    return res


def _our_shapes(op: str, ins: list, out_dtypes, quants, version: int, options: dict):
    """The output specs our kernel announces (used to declare outputs when LiteRT insists)."""
    specs = [((97,), d, q) for d, q in zip(out_dtypes, quants, strict=True)]
    try:
        res = _drive_kernel(op, ins, specs, version, options)
    except Exception:
        return None
    return [(tuple(r.shape), d, q) for r, d, q in zip(res, out_dtypes, quants, strict=True)]


def _litert(op: str, ins: list, out_dtypes, quants, version: int, reference: bool, options: dict):
    """LiteRT's outputs.  Declared output shapes are placeholders (LiteRT resizes outputs), with an
    unlikely element count because some kernels (SELECT) keep a declared shape of the right count;
    kernels that check declared shapes (SLICE) get the shapes litegpu computes instead."""
    reference = reference and ref_ok(op, version)
    specs = [((97,), d, q) for d, q in zip(out_dtypes, quants, strict=True)]
    data, feeds = build(op, ins, specs, version, **options)
    try:
        return run_litert(data, feeds, reference=reference)
    except (RuntimeError, ValueError) as first:
        ours = _our_shapes(op, ins, out_dtypes, quants, version, options)
        if ours is None or ours == specs:
            raise first
        data, feeds = build(op, ins, ours, version, **options)
        return run_litert(data, feeds, reference=reference)


class OracleCannotRead(Exception):
    """LiteRT ran but its Python API cannot return the output (a zero-sized dynamic tensor)."""


def litert_error(op: str, ins: list, out_specs, version: int = 1, reference: bool = True,
                 **options: Any) -> str | None:
    """LiteRT's error message for this op, or None when it runs."""
    dts = [d for _, d, _ in out_specs]
    qs = [q for _, _, q in out_specs]
    try:
        _litert(op, ins, dts, qs, version, reference, options)
    except Exception as e:  # LiteRT raises RuntimeError/ValueError
        return str(e)
    return None


def check(op: str, ins: list, out_dtypes: list[str] | str | None = None, *, version: int = 1,
          reference: bool = True, tol: float = 1e-5, out_quant: list | None = None, direct: bool = False,
          **options: Any) -> float:
    """Compare litegpu with LiteRT on one op; returns the worst float relative error.

    ``direct``: drive the kernel without the Interpreter (for what the Interpreter does not
    carry yet, such as string tensors)."""
    if out_dtypes is None:
        out_dtypes = [_arr(next(v for v in ins if v is not None)).dtype.name]
    elif isinstance(out_dtypes, str):
        out_dtypes = [out_dtypes]
    quants = out_quant or [None] * len(out_dtypes)
    try:
        expected = _litert(op, ins, out_dtypes, quants, version, reference, options)
    except ValueError as e:
        if "Invalid tensor size" in str(e):
            raise OracleCannotRead(f"{op}: LiteRT cannot hand out this (zero-sized dynamic) output") from e
        raise
    specs = [(tuple(e.shape), d, q) for e, d, q in zip(expected, out_dtypes, quants, strict=True)]
    got = _drive_kernel(op, ins, specs, version, options) if direct else run_ours(op, ins, specs, version, **options)
    # the same kernel when prepare cannot know the input shapes must give the same answer
    late = _drive_kernel(op, ins, specs, version, options, unknown_shapes=True)
    for g, e in zip(late, expected, strict=True):
        assert g.shape == e.shape, f"{op} (shapes known only at run): shape {g.shape} != LiteRT {e.shape}"
        if e.dtype != object and e.dtype.kind not in "SU":
            assert_allclose_rel(g, e, tol)
    assert len(got) == len(expected)
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        g = np.asarray(g)
        assert g.shape == e.shape, f"{op}: shape {g.shape} != LiteRT {e.shape}"
        if e.dtype == object or e.dtype.kind in "SU":
            assert [bytes(x) if not isinstance(x, bytes) else x for x in g.reshape(-1)] == list(e.reshape(-1))
            continue
        worst = max(worst, assert_allclose_rel(g, e, tol))
    return record(op, worst)


# Worst float error per op over a test session; dumped as JSON to $LITEGPU_WORST_FILE when set.
WORST: dict[str, float] = {}


def record(op: str, err: float) -> float:
    WORST[op] = max(WORST.get(op, 0.0), err)
    return err


def _dump_worst() -> None:
    import json
    import os
    path = os.environ.get("LITEGPU_WORST_FILE")
    if path and WORST:
        old = {}
        if os.path.exists(path):
            with open(path) as f:
                old = json.load(f)
        for k, v in WORST.items():
            old[k] = max(old.get(k, 0.0), v)
        with open(path, "w") as f:
            json.dump(old, f, indent=1, sort_keys=True)


import atexit  # noqa: E402

atexit.register(_dump_worst)
