"""Run a builder-made model in litegpu and in LiteRT's reference kernels; count identical elements.

litegpu runs end to end through ``litegpu.Interpreter`` once it exists.  Until then a
small driver executes the model's operators in order straight through the CPU kernel
registry (same prepare/run contract the interpreter uses), which is enough for the
single-op and few-op models of these tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import litegpu
import numpy as np
from litegpu.testing import rel_error, run_litert

__all__ = ["run_ours", "compare", "Stats", "record", "STATS"]


def _drive(model_bytes: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from litegpu.cpu._registry import CPU_KERNELS, NodeContext, TensorSpec, kernel_dtype

    model = litegpu.read_model(model_bytes)
    sg = model.main
    values: dict[int, np.ndarray] = {}
    specs: dict[int, TensorSpec] = {}
    for t in sg.tensors:
        specs[t.index] = TensorSpec(t.index, t.name, t.dtype, tuple(t.shape), t.quantization,
                                    None if t.data is None else np.asarray(t.data), t.is_variable)
        if t.data is not None:
            values[t.index] = np.asarray(t.data)
    for i, x in zip(sg.inputs, inputs, strict=True):
        values[i] = np.asarray(x, dtype=sg.tensors[i].dtype)
        specs[i].shape = tuple(values[i].shape)
    for op in sg.operators:
        ins = [None if i < 0 else specs[i] for i in op.inputs]
        outs = [specs[i] for i in op.outputs]
        dtype = kernel_dtype(op, ins, outs)
        prep = CPU_KERNELS.lookup(op.name, dtype, op.version)
        if prep is None:
            raise AssertionError(CPU_KERNELS.explain_missing(op.name, dtype, op.version))
        prepared = prep(NodeContext(op=op, inputs=ins, outputs=outs))
        res = prepared.run([None if i < 0 else values[i] for i in op.inputs])
        for j, (o, r) in enumerate(zip(op.outputs, res, strict=True)):
            r = np.asarray(r)
            want = prepared.output_shapes[j]
            if want is not None:
                assert tuple(r.shape) == tuple(want), f"{op.name}: run gave {r.shape}, prepare said {want}"
            assert r.dtype == np.dtype(sg.tensors[o].dtype), f"{op.name}: dtype {r.dtype} != {sg.tensors[o].dtype}"
            values[o] = r
            specs[o].shape = tuple(r.shape)
    return [values[o] for o in sg.outputs]


def run_ours(model_bytes: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    if hasattr(litegpu, "Interpreter"):
        from litegpu.testing import run_litegpu
        return run_litegpu(model_bytes, inputs)
    return _drive(model_bytes, inputs)


@dataclass
class Stats:
    total: int = 0
    identical: int = 0
    max_lsb: int = 0
    max_rel: float | None = None  # float outputs: max relative error instead of LSBs

    def add(self, ours: np.ndarray, ref: np.ndarray) -> None:
        if ours.dtype.kind == "f":
            from litegpu.testing import rel_error

            d = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
            self.max_rel = max(self.max_rel or 0.0, rel_error(ours, ref))
        else:
            d = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
            if d.size:
                self.max_lsb = max(self.max_lsb, int(d.max()))
        self.total += int(d.size)
        self.identical += int(np.sum(d == 0))


STATS: dict[str, Stats] = {}


def record(name: str, ours: np.ndarray, ref: np.ndarray) -> Stats:
    s = STATS.setdefault(name, Stats())
    s.add(ours, ref)
    return s


def run_litert_builtin(model_bytes: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LiteRT's builtin (optimized) kernels without the XNNPACK delegate."""
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_content=bytes(model_bytes), num_threads=1,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def compare(name: str, model_bytes: bytes, inputs: list[np.ndarray], *, max_lsb: int = 0,
            min_identical: float = 1.0, oracle: str = "reference") -> list[np.ndarray]:
    """Run both, record statistics under ``name`` and assert the bar for this model.

    ``oracle="builtin"`` compares with LiteRT's optimized builtin kernels (no XNNPACK), for the
    few ops whose reference kernel is broken in the pinned LiteRT (documented at the call site).
    """
    if oracle == "reference":
        ref = run_litert(model_bytes, inputs, reference=True)
    else:
        ref = run_litert_builtin(model_bytes, inputs)
    ours = run_ours(model_bytes, inputs)
    assert len(ours) == len(ref)
    spread: list[float] | None = None
    for k, (o, r) in enumerate(zip(ours, ref, strict=True)):
        o = np.asarray(o)
        assert o.shape == r.shape, f"{name}: shape {o.shape} != {r.shape}"
        assert o.dtype == r.dtype, f"{name}: dtype {o.dtype} != {r.dtype}"
        local = Stats()
        local.add(o, r)
        record(name, o, r)
        if o.dtype.kind == "f":
            # A float output (e.g. a float CONV_2D after DEQUANTIZE in a quantized model) is a float32 sum
            # whose rounding depends on the summation order, which differs with the BLAS build and the CPU
            # it dispatches to: bit identity cannot hold across machines.  The bar is LiteRT's own spread
            # on this input and machine: its optimized CPU path (XNNPACK) against its reference kernels,
            # twice over (our order is a third draw), floored at FLOAT_FLOOR for when the two agree.
            if spread is None:
                spread = [rel_error(np.asarray(x), y) for x, y in
                          zip(run_litert(model_bytes, inputs, reference=False), ref, strict=True)]
            tol = max(2.0 * spread[k], FLOAT_FLOOR)
            assert local.max_rel is not None and local.max_rel <= tol, (
                f"{name}: float output {k} relative error {local.max_rel:.2e} > {tol:.2e} "
                f"(LiteRT XNNPACK vs reference: {spread[k]:.2e})")
            continue
        frac = local.identical / max(local.total, 1)
        assert local.max_lsb <= max_lsb and frac >= min_identical, (
            f"{name}: {local.identical}/{local.total} identical, max diff {local.max_lsb} LSB")
    return ours


# Relative error (to the output's range) allowed on a float output when LiteRT's two CPU paths happen to
# agree bit for bit: 2**-20, about 8 float32 ulps at the top of the range, a few roundings of a short sum.
FLOAT_FLOOR = 2.0 ** -20

