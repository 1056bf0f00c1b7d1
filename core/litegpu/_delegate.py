"""The delegate protocol: the narrow contract between the core and a backend.

It follows TFLite's SimpleDelegate and ONNX Runtime's GetCapability/Compile:

1. The core asks the delegate, node by node, :meth:`Delegate.supports` -- "can
   you run this node?" -- and gets a :class:`Support` (yes, or no with a reason
   in words).  The delegate never sees the whole graph at this stage and never
   decides partitions.
2. The core's partitioner groups the claimed nodes into partitions (connected,
   no cycle through CPU nodes, within the configured limits) and calls
   :meth:`Delegate.prepare` once per partition with a :class:`PartitionSpec`.
   The delegate compiles whatever it needs and returns a
   :class:`DelegateKernel`.
3. On every ``invoke`` the core calls :meth:`DelegateKernel.invoke` with the
   partition's input values and gets its output values back.

Tensors that flow from one partition of a delegate to another partition of
the *same* delegate need not visit the host: :class:`PartitionSpec` marks each
output with ``host_outputs``; outputs not in that set may be returned as any
object the delegate understands (a device buffer handle), and such objects
are passed unchanged as inputs to that delegate's later partitions.  Inputs
arriving from the CPU or another delegate are always numpy arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._ir import Model, Operator, Subgraph, Tensor

__all__ = ["Support", "NodeView", "PartitionSpec", "Delegate", "DelegateKernel"]


@dataclass(frozen=True)
class Support:
    """A delegate's answer for one node."""

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Support:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Support:
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class NodeView:
    """One node as the core shows it to :meth:`Delegate.supports`.

    ``inputs``/``outputs`` are the IR tensors (``None`` for an omitted optional
    input) with the shapes the interpreter has resolved (after any
    ``resize_tensor_input``); constant inputs carry ``data``.
    """

    op: Operator
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor, ...]
    subgraph: Subgraph
    model: Model


@dataclass(frozen=True)
class PartitionSpec:
    """A connected group of nodes the core hands to a delegate.

    ``node_indices`` are in execution order.  ``inputs`` are the non-constant
    tensors read by the partition and produced outside it (or model inputs);
    ``outputs`` are the tensors produced inside and read outside (or model
    outputs), plus the variable tensors the partition reads (recurrent state): the
    delegate returns a variable's value after the run under its index, and the
    interpreter keeps it for the next invoke.  ``host_outputs`` is the subset of ``outputs`` that must come
    back as numpy arrays; the rest are only read by later partitions of this
    same delegate.  ``tensors`` maps tensor index to the resolved IR tensor
    (shape after resizing) for every tensor the partition touches.
    """

    subgraph: Subgraph
    model: Model
    node_indices: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    host_outputs: frozenset[int]
    tensors: Mapping[int, Tensor] = field(default_factory=dict)

    @property
    def operators(self) -> list[Operator]:
        return [self.subgraph.operators[i] for i in self.node_indices]


class DelegateKernel(ABC):
    """A prepared partition: compiled once, invoked many times."""

    @abstractmethod
    def invoke(self, inputs: Mapping[int, Any]) -> dict[int, Any]:
        """Run the partition.

        ``inputs`` maps each index of :attr:`PartitionSpec.inputs` to a numpy
        array, or to a device object this delegate returned earlier.  Return
        a dict with every index of :attr:`PartitionSpec.outputs`; those in
        ``host_outputs`` must be numpy arrays of the tensor's dtype and shape.
        """

    # -- asynchronous runs (optional; ``CompiledModel.run_async``).  The defaults run the whole
    # invoke in ``submit``; a GPU kernel queues the work and its reads there and waits in ``complete``.
    def submit(self, inputs: Mapping[int, Any], device_outputs: Mapping[int, Any] | None = None) -> Any:
        """Start a run on ``inputs`` (as for :meth:`invoke`); return a handle for :meth:`complete`.

        The caller completes a run before submitting the next one to the same kernel.  Inputs may
        also be device tensors this delegate's kernels returned (``device_outputs`` below) from any
        model on the same device.  ``device_outputs`` names host outputs the caller wants left on
        the device, each mapped to a device tensor of an earlier run to reuse, or None; a kernel
        that cannot keep one returns it as numpy.
        """
        return self.invoke(inputs)

    def complete(self, pending: Any) -> dict[int, Any]:
        """Wait for a :meth:`submit` handle; the outputs as :meth:`invoke` returns them."""
        return pending

    def done(self, pending: Any) -> bool:
        """Whether :meth:`complete` would return at once."""
        return True

    def input_buffer(self, index: int) -> np.ndarray | None:
        """Host memory the value of input ``index`` may be kept in, or None (the default).

        Where a kernel returns an array here (C-contiguous, the input's dtype and number of
        elements), the interpreter keeps the input's value in it: ``set_tensor`` writes into it,
        and :meth:`invoke` given that same array sends it to the device without a host copy (a
        GPU kernel offers the pinned staging its upload is made from).  The array stays valid for
        as long as anything references it, after :meth:`close` included.  The caller writes it only
        between runs, never while a run it submitted is in flight.
        """
        return None

    def to_host(self, value: Any) -> np.ndarray:
        """Turn a device object this kernel returned into a numpy array.

        Called by the core when a device-resident tensor is needed on the host
        after all (for ``get_tensor`` on an intermediate, say).
        """
        return np.asarray(value)

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release device resources (called when the interpreter is dropped)."""

    def describe(self) -> dict[str, Any]:
        """Facts about this partition for ``inspect``: transformations applied,
        planned memory, kernels launched.  Optional."""
        return {}


class Delegate(ABC):
    """What ``litegpu.load_delegate(name, options)`` returns.

    ``name`` is the backend name (``"opencl"``); ``options`` the resolved
    per-backend options (precision, device index, tuning...).
    """

    name: str = "delegate"

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options: dict[str, Any] = dict(options or {})

    @abstractmethod
    def supports(self, node: NodeView) -> Support:
        """Can this delegate run ``node``?  Answer no with a reason in words
        ("align_corners with half_pixel_centers"), never by raising."""

    @abstractmethod
    def prepare(self, partition: PartitionSpec) -> DelegateKernel:
        """Compile one partition.  Raise :class:`litegpu.DelegateError` on failure."""

    def devices(self) -> Sequence[str]:
        """Human-readable names of the devices this delegate would use."""
        return ()

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources held by the delegate itself."""
