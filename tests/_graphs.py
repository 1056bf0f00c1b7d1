"""Tiny IR graph builder for partitioner tests (no .tflite round trip needed)."""

from __future__ import annotations

import numpy as np
from litegpu._ir import Operator, Subgraph, Tensor


class GraphBuilder:
    """Build a :class:`Subgraph` op by op: ``g.op("ADD", [a, b])`` returns the output tensor index."""

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self.ops: list[Operator] = []
        self.inputs: list[int] = []

    def input(self, name: str = "x", shape=(1, 4), dtype: str = "float32") -> int:
        idx = self._tensor(name, shape, dtype)
        self.inputs.append(idx)
        return idx

    def const(self, value, name: str | None = None) -> int:
        arr = np.asarray(value, dtype=np.float32)
        arr.setflags(write=False)
        return self._tensor(name or f"c{len(self.tensors)}", arr.shape, str(arr.dtype), data=arr)

    def _tensor(self, name, shape, dtype, data=None) -> int:
        idx = len(self.tensors)
        self.tensors.append(Tensor(idx, name, dtype, tuple(shape), data=data))
        return idx

    def op(self, opcode: str, inputs, n_out: int = 1, shape=(1, 4), version: int = 1, **options):
        outs = [self._tensor(f"{opcode.lower()}{len(self.ops)}_{k}", shape, "float32") for k in range(n_out)]
        self.ops.append(Operator(len(self.ops), opcode, version, tuple(inputs), tuple(outs), options=options))
        return outs[0] if n_out == 1 else outs

    def build(self, outputs) -> Subgraph:
        return Subgraph(0, "main", tuple(self.tensors), tuple(self.ops), tuple(self.inputs), tuple(outputs))
