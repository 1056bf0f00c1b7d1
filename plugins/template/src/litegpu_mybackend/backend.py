"""The backend: spec (identity, availability, options), delegate (supports/prepare), kernel (invoke).

This template runs float32 ADD (without fused activation) with numpy so that it works out of the
box; replace the numpy parts with your device code.  Every place to change is marked TODO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
import numpy as np
from litegpu import Delegate, DelegateError, DelegateKernel, NodeView, Option, PartitionSpec, Support


def _probe_driver() -> tuple[bool, str]:
    """TODO: look for your driver/device cheaply; never raise.  Return (available, reason)."""
    return True, ""


class MyKernel(DelegateKernel):
    """One prepared partition.  Everything that does not depend on input values happens in __init__."""

    def __init__(self, partition: PartitionSpec, options: Mapping[str, Any]):
        # TODO: compile programs, allocate device buffers, upload constant tensors here.
        self._ops = [(op.inputs, op.outputs[0]) for op in partition.operators]
        tensors = partition.tensors or dict(enumerate(partition.subgraph.tensors))
        self._constants = {i: t.data for i, t in tensors.items() if t.data is not None}
        self._inputs = partition.inputs
        self._outputs = partition.outputs
        self._host = partition.host_outputs

    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        # Inputs are numpy arrays, or objects this backend returned earlier for non-host outputs.
        env = dict(self._constants)
        env.update({t: np.asarray(inputs[t]) for t in self._inputs})  # TODO: upload to the device
        for (a, b), out in self._ops:
            env[out] = np.add(env[a], env[b])  # TODO: enqueue your device kernel
        # host_outputs must be numpy arrays; the others may stay device handles (device residency).
        return {t: np.asarray(env[t], dtype=np.float32) for t in self._outputs}  # TODO: download host ones only

    def close(self) -> None:
        pass  # TODO: release device buffers


class MyDelegate(Delegate):
    name = "mybackend"

    def supports(self, node: NodeView) -> Support:
        # Decide from the node alone (op, options, tensor dtypes/shapes, constant data); say why not.
        op = node.op
        if op.name != "ADD":  # TODO: the ops your backend implements
            return Support.no("op not implemented by mybackend")
        if op.options.get("fused_activation_function", 0) != 0:
            return Support.no("fused activations are not implemented")
        tensors = [t for t in node.inputs if t is not None] + list(node.outputs)
        if any(t.dtype != "float32" for t in tensors):
            return Support.no("only float32 tensors")
        if any(tuple(t.shape) != tuple(node.outputs[0].shape) for t in tensors):
            return Support.no("broadcasting is not implemented")
        return Support.yes()

    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        try:
            return MyKernel(partition, self.options)
        except Exception as exc:  # report device failures as DelegateError (the core falls back or reports)
            raise DelegateError(f"mybackend could not prepare nodes {partition.node_indices}: {exc}") from exc

    def devices(self) -> list[str]:
        return MyBackend().devices()


class MyBackend(litegpu.BackendSpec):
    name = "mybackend"
    version = "0.1.0"
    description = "TODO: one line about your backend"
    is_gpu = True  # False for host-only backends (then `backend: auto` will not pick it)
    # Your own options, validated from YAML (backends.mybackend.*) and load_delegate(options).
    option_schema = {
        "queue_depth": Option.int(2, min=1, max=16, doc="TODO: an example option"),
    }
    # Preferred values of common options (precision, device, tuning, quantization_simulation).
    default_options: Mapping[str, Any] = {}

    def availability(self) -> tuple[bool, str]:
        return _probe_driver()

    def devices(self) -> list[str]:
        return ["TODO: device 0 name"]

    def create_delegate(self, options: Mapping[str, Any]) -> Delegate:
        return MyDelegate(options)
