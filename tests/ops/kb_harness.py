"""Test harness of the kernels-b op tests: run a ModelBuilder model in LiteRT and in litegpu.

``run_ours(model, inputs)`` uses ``litegpu.Interpreter`` when it exists.  Until
then it drives the CPU kernels itself from the reader's IR (same prepare/run
contract as the interpreter: shared ``resources``, ``call_subgraph`` for
control flow, variable tensors passed as their own writable storage), which
also checks each kernel's promise that the shapes prepare announces are the
shapes run returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from litegpu.testing import assert_allclose_rel, run_litert

TOL = 1e-5  # float outputs: max |ours - LiteRT| / max |LiteRT|

# Worst relative error seen per test module (printed by the tests' final summary).
WORST: dict[str, float] = {}


def record(group: str, err: float) -> float:
    WORST[group] = max(WORST.get(group, 0.0), err)
    return err


def interpreter_available() -> bool:
    import litegpu

    return hasattr(litegpu, "Interpreter")


class MiniRunner:
    """A minimal stand-in for the Interpreter (kernels only, no delegates)."""

    def __init__(self, model_bytes: bytes):
        from litegpu._reader import read_model

        self.model = read_model(bytes(model_bytes))
        self.resources: dict[Any, Any] = {}
        self._plans: dict[tuple, tuple] = {}
        self._vars: dict[tuple[int, int], np.ndarray] = {}

    def _specs(self, sg):
        from litegpu.cpu._registry import TensorSpec

        out = []
        for t in sg.tensors:
            s = TensorSpec(t.index, t.name, t.dtype, tuple(t.shape), t.quantization,
                           None if t.is_variable else t.data, t.is_variable)
            s.sparsity = t.sparsity
            if t.is_dynamic or not t.has_rank:
                s.shape = None
            out.append(s)
        return out

    def subgraph_io(self, index: int):
        sg = self.model.subgraphs[index]
        specs = self._specs(sg)
        return [specs[i] for i in sg.inputs], [specs[i] for i in sg.outputs]

    def _plan(self, index: int, shapes: tuple):
        key = (index, shapes)
        if key in self._plans:
            return self._plans[key]
        from litegpu.cpu._registry import CPU_KERNELS, NodeContext, kernel_dtype

        sg = self.model.subgraphs[index]
        specs = self._specs(sg)
        for i, s in zip(sg.inputs, shapes, strict=True):
            specs[i].shape = s
        steps = []
        for op in sg.operators:
            ins = [specs[i] if i >= 0 else None for i in op.inputs]
            outs = [specs[o] for o in op.outputs]
            fn = CPU_KERNELS.lookup(op.name, kernel_dtype(op, ins, outs), op.version)
            if fn is None:
                raise AssertionError(CPU_KERNELS.explain_missing(op.name, kernel_dtype(op, ins, outs), op.version))
            ctx = NodeContext(op, ins, outs, call_subgraph=self.call_subgraph, subgraph_io=self.subgraph_io,
                              resources=self.resources)
            p = fn(ctx)
            assert len(p.output_shapes) == len(op.outputs)
            for o, s in zip(op.outputs, p.output_shapes, strict=True):
                specs[o].shape = None if s is None else tuple(s)
            steps.append((op, p))
        plan = (sg, specs, steps)
        self._plans[key] = plan
        return plan

    def call_subgraph(self, index: int, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        sg, specs, steps = self._plan(index, tuple(tuple(np.shape(a)) for a in arrays))
        vals: dict[int, Any] = {}
        for t in sg.tensors:
            if t.is_variable:
                key = (index, t.index)
                if key not in self._vars:
                    self._vars[key] = np.zeros(t.shape, t.dtype)
                vals[t.index] = self._vars[key]
            elif t.data is not None:
                vals[t.index] = t.data
        for i, a in zip(sg.inputs, arrays, strict=True):
            vals[i] = np.asarray(a)
        for op, p in steps:
            res = p.run([vals[i] if i >= 0 else None for i in op.inputs])
            assert len(res) == len(op.outputs), f"{op.name}: {len(res)} outputs, expected {len(op.outputs)}"
            for o, r in zip(op.outputs, res, strict=True):
                spec = specs[o]
                if spec.shape is not None:
                    assert tuple(r.shape) == tuple(spec.shape), \
                        f"{op.name}: prepare promised {spec.shape}, run gave {r.shape}"
                if spec.dtype not in ("resource", "variant", "string"):
                    assert r.dtype == np.dtype(spec.dtype), f"{op.name}: dtype {r.dtype} != {spec.dtype}"
                vals[o] = r
        return [vals[o] for o in sg.outputs]

    def reset_all_variables(self) -> None:
        for v in self._vars.values():
            v[...] = 0


def run_ours(model: bytes, inputs: Sequence[np.ndarray], invokes: int = 1) -> list[np.ndarray]:
    """litegpu's outputs after ``invokes`` invokes on the same inputs."""
    if interpreter_available():
        import litegpu

        it = litegpu.Interpreter(model_content=bytes(model))
        for d, x in zip(it.get_input_details(), inputs, strict=True):
            if tuple(d["shape"]) != np.shape(x):
                it.resize_tensor_input(d["index"], list(np.shape(x)))
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs, strict=True):
            it.set_tensor(d["index"], np.asarray(x))
        for _ in range(invokes):
            it.invoke()
        return [it.get_tensor(d["index"]) for d in it.get_output_details()]
    r = MiniRunner(model)
    out = None
    for _ in range(invokes):
        out = r.call_subgraph(0, inputs)
    return [np.array(o) for o in out]


def run_litert_n(model: bytes, inputs: Sequence[np.ndarray], invokes: int = 1,
                 reference: bool = True) -> list[np.ndarray]:
    if invokes == 1:
        return run_litert(model, inputs, reference=reference)
    from ai_edge_litert import interpreter as litert

    kw: dict[str, Any] = {"num_threads": 1}
    if reference:
        kw["experimental_op_resolver_type"] = litert.OpResolverType.BUILTIN_REF
    it = litert.Interpreter(model_content=bytes(model), **kw)
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        if tuple(d["shape"]) != np.shape(x):
            it.resize_tensor_input(d["index"], list(np.shape(x)))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(d["index"], np.asarray(x, dtype=d["dtype"]))
    for _ in range(invokes):
        it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def compare(model: bytes, inputs: Sequence[np.ndarray], group: str, *, tol: float = TOL, invokes: int = 1,
            reference: bool = True, ref_model: bytes | None = None) -> float:
    """Run both, assert every output matches (floats within ``tol``, others exactly); worst error.

    ``ref_model`` is an equivalent model for LiteRT when it refuses ``model`` (e.g. a
    missing optional bias that LiteRT's float conv insists on: it gets explicit zeros)."""
    ref = run_litert_n(ref_model if ref_model is not None else model, inputs, invokes, reference)
    ours = run_ours(model, inputs, invokes)
    assert len(ours) == len(ref)
    worst = 0.0
    for a, e in zip(ours, ref, strict=True):
        assert a.shape == e.shape, f"shape {a.shape} != LiteRT {e.shape}"
        worst = max(worst, assert_allclose_rel(a, e, tol))
    return record(group, worst)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
