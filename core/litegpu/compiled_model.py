"""``litegpu.compiled_model.CompiledModel``: LiteRT 2.x's CompiledModel API on litegpu.

Names, signatures, return types and errors follow ``ai_edge_litert.compiled_model`` 2.3, so a
LiteRT script ports by its import lines.  ``hardware_accel`` picks where the model runs:
``GPU`` on the first backend of the configuration's ``backend`` list that loads (``auto``: the
first available GPU backend, no measuring), ``CPU`` on litegpu's CPU interpreter; without
``CPU`` in the flags a model the GPU backend does not run whole is refused, as LiteRT does.

litegpu adds (keyword arguments LiteRT does not have):

* ``config`` / ``backend`` on the factories: the configuration (as for :func:`litegpu.load`);
* :meth:`CompiledModel.run_async`: a run that returns a :class:`RunHandle` at once.  Up to
  ``max_in_flight`` runs of one model are in flight (each in its own copy of the compiled model:
  its own device buffers); reading an output buffer waits only for the run that writes it;
* ``keep_outputs_on_device=True``: the outputs stay on the device (float32 outputs of a model a
  GPU backend runs whole); such a buffer fed to another model on the same device is a device copy,
  no host round trip.  Elsewhere it is read once, on the host (the CPU fallback).

Runs on the asynchronous path need the model's plan to be one GPU partition (``is_fully_accelerated``);
other plans run inside ``run_async`` (a WARNING says so once per model).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._errors import LiteGPUError
from ._interpreter import Interpreter, _Entry
from ._ir import Model, Subgraph
from ._plan import numpy_dtype
from .hardware_accelerator import HardwareAccelerator
from .tensor_buffer import _VERSIONS, TensorBuffer

__all__ = ["CompiledModel", "RunHandle", "RowsHandle", "HardwareAccelerator", "TensorBuffer"]

log = logging.getLogger("litegpu")

PLACEHOLDER_SIGNATURE = "<placeholder signature>"
#: LiteRT's buffer type code for host memory (``kLiteRtTensorBufferTypeHostMemory``)
HOST_MEMORY = 1


def _cm_error(code: int, message: str) -> RuntimeError:
    return RuntimeError(f"CompiledModel error: code={code}, message={message}")


class _Signature:
    """One signature as CompiledModel sees it: a key, ordered input/output names -> tensor index."""

    def __init__(self, key: str, subgraph: Subgraph, inputs: Mapping[str, int], outputs: Mapping[str, int]):
        self.key, self.subgraph = key, subgraph
        self.inputs, self.outputs = dict(inputs), dict(outputs)
        self.input_names, self.output_names = list(inputs), list(outputs)
        self._io: _SignatureIo | None = None

    @property
    def index(self) -> int:
        return self.subgraph.index

    def io(self, shape_of: Any = None) -> _SignatureIo:
        """What a run needs of each input and output at the current shapes (``shape_of(tid)``),
        computed once; a resize resets it."""
        if self._io is None:
            self._io = _SignatureIo(self, shape_of)
        return self._io


class _TensorSpec:
    """One input or output of a signature as the run path checks and views it."""

    __slots__ = ("tid", "tensor", "shape", "dtype", "size", "nbytes", "f32")

    def __init__(self, tid: int, tensor: Any, shape: Sequence[int]):
        self.tid, self.tensor = tid, tensor
        self.shape = tuple(int(d) for d in shape)
        dt = numpy_dtype(tensor.dtype)
        self.dtype = dt if dt is not None else np.dtype(np.uint8)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * (dt.itemsize if dt is not None else 1)
        self.f32 = tensor.dtype == "float32"


class _SignatureIo:
    def __init__(self, s: _Signature, shape_of: Any = None):
        tensors = s.subgraph.tensors

        def spec(tid: int) -> _TensorSpec:
            return _TensorSpec(tid, tensors[tid], shape_of(tid) if shape_of else tensors[tid].shape)

        self.ins = [spec(s.inputs[n]) for n in s.input_names]
        self.outs = [spec(s.outputs[n]) for n in s.output_names]
        self.out_tids = [o.tid for o in self.outs]
        self.by_tid = {sp.tid: sp for sp in (*self.ins, *self.outs)}


def _signatures(model: Model) -> list[_Signature]:
    if not model.signatures:  # LiteRT names the main subgraph's inputs/outputs by their tensors
        sg = model.subgraphs[0]
        return [_Signature(PLACEHOLDER_SIGNATURE, sg, {sg.tensors[i].name: i for i in sg.inputs},
                           {sg.tensors[i].name: i for i in sg.outputs})]
    out = []
    for s in model.signatures:
        if not 0 <= s.subgraph_index < len(model.subgraphs):
            raise RuntimeError(f"Failed to build flatbuffer model: signature {s.key!r} refers to a missing subgraph")
        out.append(_Signature(s.key, model.subgraphs[s.subgraph_index], s.inputs, s.outputs))
    return out


class _Slot:
    """One copy of the compiled model (own plans, own device buffers) and the run it has in flight."""

    def __init__(self, interpreter: Interpreter):
        self.interpreter = interpreter
        self.run: RunHandle | None = None
        #: by subgraph index: (entry, async kernel or None, GPU executor kernel?), see CompiledModel._prepare
        self.prepared: dict[int, tuple[_Entry, Any, bool]] = {}


_RUN_SEQ = itertools.count()


class RunHandle:
    """A run started by :meth:`CompiledModel.run_async` (future-like).

    ``done()`` says whether it ended, ``wait()`` (or ``result()``) waits for it and returns the
    output buffers.  An error of the run is raised by ``wait``.
    """

    def __init__(self, outputs: list[TensorBuffer], kernel: Any = None, pending: Any = None,
                 targets: Sequence[tuple[int, TensorBuffer]] = (), slot: _Slot | None = None,
                 dest: Mapping[int, np.ndarray] | None = None):
        self.outputs = outputs
        self._kernel, self._pending, self._targets, self._slot = kernel, pending, list(targets), slot
        self._dest = dest or {}  # outputs read straight into their buffers' host memory
        self._finished = kernel is None
        self._error: BaseException | None = None
        self.seq = next(_RUN_SEQ)  # submission order

    def done(self) -> bool:
        if self._finished:
            return True
        try:
            return bool(self._kernel.done(self._pending))
        except Exception as e:  # a failing device: wait() raises it
            self._error = e
            return True

    def wait(self, timeout: float | None = None) -> list[TensorBuffer]:
        """Wait for the run; its output buffers.  ``timeout`` is accepted for ``concurrent.futures``
        compatibility; a device that hangs raises its own timeout error (Vulkan ``fence_timeout``)."""
        if not self._finished:
            self._finished = True
            try:
                if self._error is not None:
                    raise self._error
                values = self._kernel.complete(self._pending)
                for tid, buf in self._targets:
                    v = values[tid]
                    if v is self._dest.get(tid):  # already in the buffer
                        buf._host_valid, buf._device_valid = True, False
                        buf._version = next(_VERSIONS)
                    else:
                        buf._store(v)
            except BaseException as e:
                self._error = e
            finally:
                for _tid, buf in self._targets:
                    if buf._pending is self:
                        buf._pending = None
                if self._slot is not None and self._slot.run is self:
                    self._slot.run = None
                self._pending = None
        if self._error is not None:
            raise self._error
        return self.outputs

    result = wait


class RowsHandle:
    """Runs started together by :meth:`CompiledModel.run_rows_async` (future-like).

    ``done()`` says whether all of them ended; ``wait()`` (or ``result()``) waits for all of them and
    returns the output arrays it was given, now filled.  An error of any run is raised by ``wait``
    once every run has ended (the rows of a failed submission hold no result).
    """

    def __init__(self, handles: list[RunHandle], outputs: list[np.ndarray]):
        self._handles = handles
        self.outputs = outputs

    def done(self) -> bool:
        return all(h.done() for h in self._handles)

    def wait(self, timeout: float | None = None) -> list[np.ndarray]:
        """Wait for every run; the output arrays.  ``timeout``: as for :meth:`RunHandle.wait`."""
        error: BaseException | None = None
        for h in self._handles:
            try:
                h.wait()
            except BaseException as e:  # every run ends before the first error is raised
                error = error or e
        if error is not None:
            raise error
        return self.outputs

    result = wait


class CompiledModel:
    """A model compiled for a hardware accelerator: LiteRT's ``CompiledModel`` on litegpu."""

    #: default most runs of one model in flight (each needs its own device buffers)
    MAX_IN_FLIGHT = 4

    def __init__(self, model: Model, interpreter_factory: Any, accel: HardwareAccelerator, backend: str,
                 environment: Any = None, max_in_flight: int = MAX_IN_FLIGHT):
        self._model_ir = model
        self._factory = interpreter_factory
        self._accel = accel
        self.backend = backend  # "cpu" or the litegpu backend running the model
        self._environment = environment
        self.max_in_flight = int(max_in_flight)
        self._sigs = _signatures(model)
        self._slots: list[_Slot] = [_Slot(interpreter_factory())]
        self._told_sync = False
        self._closed = False
        self._main = self._slots[0].interpreter
        cpu_ops = self._cpu_ops() if backend != "cpu" else []  # compiles every signature now, as LiteRT does
        if cpu_ops and not accel & HardwareAccelerator.CPU:
            raise RuntimeError(
                "Some ops are not accelerated. Add kLiteRtHwAcceleratorCpu to the compilation accelerator "
                f"set to allow using the CPU to run those (litegpu backend {backend!r} does not run "
                f"{', '.join(cpu_ops)}; hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU runs them "
                "on the CPU)")

    # ------------------------------------------------------------------ factories

    @classmethod
    def from_file(cls, model_path: str, hardware_accel: HardwareAccelerator | None = None,
                  environment: Any = None, options: Any = None, *, config: Any = None, backend: Any = None,
                  max_in_flight: int = MAX_IN_FLIGHT) -> CompiledModel:
        """Load and compile the ``.tflite`` file ``model_path``."""
        from ._reader import read_model

        try:
            model = read_model(os.fspath(model_path))
        except (LiteGPUError, OSError) as e:
            raise RuntimeError(f"Failed to load model from file\n└ Failed to build flatbuffer model: {e}") from e
        return cls._build(model, hardware_accel, environment, options, config, backend, max_in_flight)

    @classmethod
    def from_buffer(cls, model_data: bytes, hardware_accel: HardwareAccelerator | None = None,
                    environment: Any = None, options: Any = None, *, config: Any = None, backend: Any = None,
                    max_in_flight: int = MAX_IN_FLIGHT) -> CompiledModel:
        """Compile a model from its ``.tflite`` bytes."""
        from ._reader import read_model

        try:
            model = read_model(bytes(model_data))
        except (LiteGPUError, OSError, TypeError) as e:
            raise RuntimeError(f"Failed to build model from buffer\n└ Invalid flatbuffer: {e}") from e
        return cls._build(model, hardware_accel, environment, options, config, backend, max_in_flight)

    @classmethod
    def _build(cls, model: Model, hardware_accel: Any, environment: Any, options: Any, config: Any,
               backend: Any, max_in_flight: int) -> CompiledModel:
        if options is not None:
            if hardware_accel is not None:
                raise ValueError("Pass either options or hardware_accel, not both.")
            hardware_accel = getattr(options, "hardware_accelerators", None)
        accel = HardwareAccelerator(int(hardware_accel if hardware_accel is not None else HardwareAccelerator.CPU))
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if not accel & (HardwareAccelerator.CPU | HardwareAccelerator.GPU):
            raise RuntimeError(
                "Some ops are not accelerated. Add kLiteRtHwAcceleratorCpu to the compilation accelerator set "
                "to allow using the CPU to run those. (litegpu has no NPU backend; use HardwareAccelerator.GPU "
                "or HardwareAccelerator.CPU)")
        from ._config import load_config

        overrides = {} if backend is None else {"backend": backend}
        cfg = load_config(config, **overrides)
        name, delegate = "cpu", None
        if accel & HardwareAccelerator.GPU:
            name, delegate = _shared_delegate(cfg)
            if delegate is None:
                why = f"none of the configured backends {cfg.backends} loads (see `litegpu backends`)"
                if not accel & HardwareAccelerator.CPU:
                    raise RuntimeError(f"HardwareAccelerator.GPU: no litegpu GPU backend is available: {why}; "
                                       "add HardwareAccelerator.CPU to run on the CPU")
                log.warning("HardwareAccelerator.GPU requested but %s: running on the CPU", why)
        partition = cfg.partition_options()

        def factory() -> Interpreter:
            it = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else None)
            it.set_partition_options(partition)
            return it

        return cls(model, factory, accel, name, environment, max_in_flight)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> CompiledModel:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()

    def close(self) -> None:
        """Wait for runs in flight and release the compiled model."""
        for slot in getattr(self, "_slots", ()):
            if slot.run is not None:
                try:
                    slot.run.wait()
                except Exception:  # closing must not raise for a failed run
                    pass
        self._slots = []
        self._closed = True

    @property
    def environment(self) -> Any:
        """The environment passed to the factory (litegpu needs none)."""
        return self._environment

    def _open(self) -> None:
        if self._closed:
            raise AttributeError("'NoneType' object has no attribute: the CompiledModel is closed")

    # ------------------------------------------------------------------ signatures

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        self._open()
        return {s.key: {"inputs": list(s.input_names), "outputs": list(s.output_names)} for s in self._sigs}

    def get_signature_by_index(self, index: int) -> dict[str, Any]:
        self._open()
        s = self._sig_at(index)
        return {"key": s.key, "inputs": list(s.input_names), "outputs": list(s.output_names)}

    def get_num_signatures(self) -> int:
        self._open()
        return len(self._sigs)

    def get_signature_index(self, key: str) -> int:
        self._open()
        return next((k for k, s in enumerate(self._sigs) if s.key == key), -1)

    def _sig_at(self, index: Any, code: int = 1000, prefix: str = "") -> _Signature:
        if isinstance(index, bool) or not isinstance(index, int | np.integer) or not 0 <= index < len(self._sigs):
            raise _cm_error(code, f"{prefix}Signature index is out of range of signature keys")
        return self._sigs[int(index)]

    def _sig_named(self, key: str) -> _Signature:
        for s in self._sigs:
            if s.key == key:
                return s
        raise _cm_error(6, f"Signature not found: {key}")

    def _io(self, s: _Signature) -> _SignatureIo:
        """The signature's inputs and outputs at the current shapes (after a resize: planned for them)."""
        if s._io is None:
            it = self._main
            entry = it._entry_for(s.subgraph.index)
            it._allocate(entry)
            s.io(lambda tid: it._shape(entry, tid))
        return s.io()

    def _details(self, s: _Signature, names: Sequence[str], where: Mapping[str, int]) -> dict[str, Any]:
        out = {}
        io = self._io(s)
        for n in names:
            sp = io.by_tid[where[n]]
            out[n] = {"name": sp.tensor.name, "index": sp.tensor.index, "dtype": _dtype_name(sp.tensor.dtype),
                      "shape": list(sp.shape)}
        return out

    def get_input_tensor_details(self, signature_key: str) -> dict[str, Any]:
        self._open()
        s = self._sig_named(signature_key)
        return self._details(s, s.input_names, s.inputs)

    def get_output_tensor_details(self, signature_key: str) -> dict[str, Any]:
        self._open()
        s = self._sig_named(signature_key)
        return self._details(s, s.output_names, s.outputs)

    def _requirements(self, tid: int, s: _Signature) -> dict[str, Any]:
        return {"buffer_size": self._io(s).by_tid[tid].nbytes, "supported_types": [HOST_MEMORY]}

    def get_input_buffer_requirements(self, input_index: int, signature_index: int = 0) -> dict[str, Any]:
        self._open()
        s = self._sig_at(signature_index)
        return self._requirements(s.inputs[s.input_names[self._io_index(input_index, s.input_names)]], s)

    def get_output_buffer_requirements(self, output_index: int, signature_index: int = 0) -> dict[str, Any]:
        self._open()
        s = self._sig_at(signature_index)
        return self._requirements(s.outputs[s.output_names[self._io_index(output_index, s.output_names)]], s)

    @staticmethod
    def _io_index(i: Any, names: Sequence[str]) -> int:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < len(names):
            raise _cm_error(1000, f"tensor index {i} out of range ({len(names)} tensors)")
        return int(i)

    def is_fully_accelerated(self) -> bool:
        """True when every node of every signature runs on the chosen accelerator (CPU: always)."""
        self._open()
        if self.backend == "cpu":
            return True
        return not self._cpu_ops()

    def _cpu_ops(self) -> list[str]:
        ops = []
        it = self._main
        for s in self._sigs:
            entry = it._entry_for(s.subgraph.index)
            it._allocate(entry)
            for seg in entry.plan.segments:
                if seg.backend == "cpu":
                    ops += [f"{s.subgraph.operators[n].name} (node {n})" for n in seg.node_indices]
        return ops

    # ------------------------------------------------------------------ buffers

    def _buffer(self, s: _Signature, tid: int) -> TensorBuffer:
        t = s.subgraph.tensors[tid]
        dt = numpy_dtype(t.dtype)
        if dt is None:
            raise _cm_error(1000, f"tensor {t.name!r} has type {t.dtype}, which has no buffer in litegpu")
        return TensorBuffer._create(dt, self._io(s).by_tid[tid].shape, self._environment)

    def create_input_buffer_by_name(self, signature_key: str, input_name: str) -> TensorBuffer:
        self._open()
        s = self._sig_named(signature_key)
        if input_name not in s.inputs:
            raise _cm_error(6, f"Input tensor not found: {input_name}")
        return self._buffer(s, s.inputs[input_name])

    def create_output_buffer_by_name(self, signature_key: str, output_name: str) -> TensorBuffer:
        self._open()
        s = self._sig_named(signature_key)
        if output_name not in s.outputs:
            raise _cm_error(6, f"Output tensor not found: {output_name}")
        return self._buffer(s, s.outputs[output_name])

    def create_input_buffers(self, signature_index: int) -> list[TensorBuffer]:
        self._open()
        s = self._sig_at(signature_index)
        return [self._buffer(s, s.inputs[n]) for n in s.input_names]

    def create_output_buffers(self, signature_index: int) -> list[TensorBuffer]:
        self._open()
        s = self._sig_at(signature_index)
        return [self._buffer(s, s.outputs[n]) for n in s.output_names]

    def resize_input_tensor(self, input_index: int, dims: Sequence[int], signature_index: int = 0,
                            strict: bool = True) -> None:
        """Run input ``input_index`` of the signature at shape ``dims`` from now on, as LiteRT does:
        ``strict`` allows changing only the dimensions the model declares unknown (-1 in its shape
        signature), ``strict=False`` any.  The model is planned and compiled again for the new shapes
        (every copy of it; runs in flight end first), so tensor details, buffer requirements and
        ``create_*_buffers`` follow, and buffers of the old shape are refused by the runs."""
        self._open()
        s = self._sig_at(signature_index)
        tid = s.inputs[s.input_names[self._io_index(input_index, s.input_names)]]
        from ._errors import InterpreterError

        main = self._main
        entry = main._entry_for(s.subgraph.index)
        try:
            main._resize(entry, tid, dims, bool(strict))
        except (InterpreterError, ValueError) as e:
            raise _cm_error(1, f"New shape is not compatible with current shape. ({e})") from e
        new = entry.input_shapes[tid]
        for slot in self._slots:
            if slot.run is not None:
                slot.run.wait()
            if slot.interpreter is not main:
                slot.interpreter._resize(slot.interpreter._entry_for(s.subgraph.index), tid, new, False)
            slot.prepared.pop(s.subgraph.index, None)
        for other in self._sigs:  # signatures sharing the subgraph see the new shapes too
            if other.subgraph.index == s.subgraph.index:
                other._io = None
        try:
            main._allocate(entry)  # planned and compiled now: a shape the model cannot take fails here
        except LiteGPUError as e:
            raise _cm_error(1, f"Failed to resize input tensor to {list(new)}: {e}") from e
        if self.backend != "cpu" and not self._accel & HardwareAccelerator.CPU:
            cpu_ops = self._cpu_ops()
            if cpu_ops:
                raise RuntimeError(f"Some ops are not accelerated at the new shape {list(new)}: litegpu backend "
                                   f"{self.backend!r} does not run {', '.join(cpu_ops)}")

    def resize_input_tensor_by_name(self, signature_key: str, input_name: str, dims: Sequence[int],
                                    strict: bool = True) -> None:
        signature_index = self.get_signature_index(signature_key)
        if signature_index < 0:
            raise ValueError(f"Unknown signature: {signature_key}")
        names = self._sigs[signature_index].input_names
        if input_name not in names:
            raise ValueError(f"Unknown input '{input_name}' for signature '{signature_key}'")
        self.resize_input_tensor(names.index(input_name), dims, signature_index, strict)

    # ------------------------------------------------------------------ running

    def run_by_name(self, signature_key: str, input_map: Mapping[str, TensorBuffer],
                    output_map: Mapping[str, TensorBuffer], *, keep_outputs_on_device: bool = False) -> None:
        """Run signature ``signature_key`` on the named buffers (waits for the run)."""
        self.run_async_by_name(signature_key, input_map, output_map,
                               keep_outputs_on_device=keep_outputs_on_device).wait()

    def run_by_index(self, signature_index: int, input_buffers: Sequence[TensorBuffer],
                     output_buffers: Sequence[TensorBuffer], *, keep_outputs_on_device: bool = False) -> None:
        """Run signature ``signature_index`` on the buffers, in signature order (waits for the run)."""
        self.run_async(signature_index, input_buffers, output_buffers,
                       keep_outputs_on_device=keep_outputs_on_device).wait()

    def run_async_by_name(self, signature_key: str, input_map: Mapping[str, TensorBuffer],
                          output_map: Mapping[str, TensorBuffer], *,
                          keep_outputs_on_device: bool = False) -> RunHandle:
        """:meth:`run_async` with named buffers."""
        self._open()
        index = self.get_signature_index(signature_key)
        if index < 0:
            raise _cm_error(6, "Failed to get signature_index")
        s = self._sigs[index]
        if any(n not in output_map for n in s.output_names):
            raise _cm_error(6, "The given map is missing some output TensorBuffers")
        if any(n not in input_map for n in s.input_names):
            raise _cm_error(6, "The given map is missing some input TensorBuffers")
        return self.run_async(index, [input_map[n] for n in s.input_names], [output_map[n] for n in s.output_names],
                              keep_outputs_on_device=keep_outputs_on_device)

    def run_async(self, signature_index: int, input_buffers: Sequence[TensorBuffer],
                  output_buffers: Sequence[TensorBuffer], *, keep_outputs_on_device: bool = False) -> RunHandle:
        """Start a run; returns a :class:`RunHandle` at once (``done()``, ``wait()``).

        Runs of a model a GPU backend runs whole are queued on the device and return before it
        ends; up to :attr:`max_in_flight` of them are in flight, the oldest is waited for beyond
        that.  Reading an output buffer waits for the run that writes it, not for later ones.
        """
        self._open()
        s = self._sig_at(signature_index, 1000, "Failed to invoke the compiled model\n└ ")
        io = self._io(s)
        inputs, outputs = list(input_buffers), list(output_buffers)
        if len(inputs) != len(io.ins):
            raise _cm_error(3, "Failed to invoke the compiled model\n└ Input buffer size mismatch: number of "
                               f"inputs:{len(io.ins)} vs buffers:{len(inputs)}")
        if len(outputs) != len(io.outs):
            raise _cm_error(3, "Failed to invoke the compiled model\n└ Output buffer size mismatch: number of "
                               f"outputs:{len(io.outs)} vs buffers:{len(outputs)}")
        # the checks of _check_buffer, at the cost of a few attribute reads when the buffers fit
        for k, (spec, b) in enumerate(zip(io.ins, inputs, strict=True)):
            if type(b) is not TensorBuffer or b._destroyed or b._shape != spec.shape or b.nbytes != spec.nbytes:
                self._check_buffer(b, spec, f"input {k}", exact=True)
        for k, (spec, b) in enumerate(zip(io.outs, outputs, strict=True)):
            if type(b) is not TensorBuffer or b._destroyed or b.nbytes < spec.nbytes:
                self._check_buffer(b, spec, f"output {k}", exact=False)
        # a buffer this run writes may still be written by an earlier run: that one ends first
        for b in outputs:
            if b._pending is not None:
                b._pending.wait()
        slot = self._free_slot()
        prepared = slot.prepared.get(s.index)
        if prepared is None:
            prepared = slot.prepared[s.index] = self._prepare(slot, s)
        entry, kernel, fast = prepared
        if kernel is None:
            return self._run_sync(slot.interpreter, entry, s, inputs, outputs)
        device = kernel.device if fast else getattr(kernel, "device", None)
        values: dict[int, Any] = {}
        stamps: dict[int, Any] = {}
        for spec, b in zip(io.ins, inputs, strict=True):
            dt = b._device
            if spec.f32 and b._device_valid and dt is not None and dt.device is device and dt.size == spec.size:
                values[spec.tid] = dt  # on this device (a run still writing it is ahead in the same queue)
                continue
            b._settle()
            b._ensure_host()
            if fast:  # the buffer's memory, lent (the kernel copies it where its upload would read it later)
                values[spec.tid] = b._view(spec.dtype, spec.shape)
                if not b._external:
                    stamps[spec.tid] = b._version
            else:
                values[spec.tid] = b._array(spec.dtype, spec.shape)
        keep: dict[int, Any] = {}
        dest: dict[int, np.ndarray] = {}
        if keep_outputs_on_device and device is not None:
            from .gpu._runtime import DeviceTensor

            for spec, b in zip(io.outs, outputs, strict=True):
                if spec.f32 and b._dtype == np.float32:
                    dt = b._device
                    if not (dt is not None and dt.device is device and dt.ref.nbytes >= b.nbytes):
                        dt = DeviceTensor.empty(device, b._shape)
                    keep[spec.tid] = dt
        if fast:
            for spec, b in zip(io.outs, outputs, strict=True):
                if spec.f32 and spec.tid not in keep:
                    dest[spec.tid] = b._view(spec.dtype, spec.shape)  # read straight into the buffer
            pending = kernel.submit(values, keep, out=dest, stamps=stamps, borrowed=True)
        else:
            pending = kernel.submit(values, keep)
        handle = RunHandle(outputs, kernel, pending, list(zip(io.out_tids, outputs, strict=True)), slot, dest)
        slot.run = handle
        for spec, b in zip(io.outs, outputs, strict=True):
            b._pending = handle
            if spec.tid in keep:  # on the device from now on: a model on the same device reads it without waiting
                b._store(keep[spec.tid])
        return handle

    def run_rows(self, signature_index: int, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """:meth:`run_rows_async` and wait for it."""
        self.run_rows_async(signature_index, inputs, outputs).wait()

    def run_rows_async(self, signature_index: int, inputs: Sequence[np.ndarray],
                       outputs: Sequence[np.ndarray]) -> RowsHandle:
        """Start ``K`` runs of signature ``signature_index`` at once; returns a :class:`RowsHandle`.

        ``inputs``: per signature input (in signature order) a C-contiguous array of shape
        ``(K, *input_shape)`` in the input's dtype, row ``k`` being run ``k``'s value; ``outputs``:
        likewise per output, ``(K, *output_shape)``, which the handle's ``wait()`` fills.  The arrays
        must stay alive and unchanged until then.  Each row's result is the one :meth:`run_async`
        gives for it.

        On a model a GPU backend runs whole with dense float32 inputs and outputs, on an API that
        can (Vulkan), the K runs take one copy of the compiled model and go to the device as one
        submission: each tensor's K rows are copied into mapped staging memory at once, one
        ``vkQueueSubmit`` carries the K runs, one wait covers them, and each output's K rows are
        copied out at once, so the host's Python work and driver calls are per K runs, not per run.
        Elsewhere the rows run one by one through :meth:`run_async` (each row lent as its buffer,
        no copy), with up to :attr:`max_in_flight` in flight.
        """
        self._open()
        s = self._sig_at(signature_index, 1000, "Failed to invoke the compiled model\n└ ")
        io = self._io(s)
        for what, given in (("inputs", inputs), ("outputs", outputs)):
            if isinstance(given, np.ndarray) or not isinstance(given, Sequence):
                raise _cm_error(3, f"Failed to invoke the compiled model\n└ {what} must be a list of numpy arrays, "
                                   f"one (K, *shape) array per signature {what[:-1]}; got {type(given).__name__}")
        ins, outs = list(inputs), list(outputs)
        if len(ins) != len(io.ins) or len(outs) != len(io.outs):
            raise _cm_error(3, "Failed to invoke the compiled model\n└ Buffer count mismatch: the signature has "
                               f"{len(io.ins)} inputs and {len(io.outs)} outputs; got {len(ins)} and {len(outs)} arrays")
        runs = None
        for what, specs, arrays in (("input", io.ins, ins), ("output", io.outs, outs)):
            for k, (spec, a) in enumerate(zip(specs, arrays, strict=True)):
                if not isinstance(a, np.ndarray) or a.dtype != spec.dtype or tuple(a.shape[1:]) != spec.shape \
                        or a.ndim != len(spec.shape) + 1 or not a.flags.c_contiguous \
                        or (what == "output" and not a.flags.writeable):
                    got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
                    raise _cm_error(3, f"Failed to invoke the compiled model\n└ {what} {k} ({spec.tensor.name}): "
                                       f"expected a C-contiguous{' writeable' if what == 'output' else ''} array of "
                                       f"{spec.dtype.name}[K, {', '.join(map(str, spec.shape))}] (one row per run), "
                                       f"got {got}")
                if runs is None:
                    runs = int(a.shape[0])
                elif a.shape[0] != runs:
                    raise _cm_error(3, f"Failed to invoke the compiled model\n└ {what} {k} has {a.shape[0]} rows, "
                                       f"the first input {runs}: every array needs one row per run")
        if not runs:
            raise _cm_error(3, "Failed to invoke the compiled model\n└ run_rows_async needs at least one row")
        slot = self._free_slot()
        prepared = slot.prepared.get(s.index)
        if prepared is None:
            prepared = slot.prepared[s.index] = self._prepare(slot, s)
        _entry, kernel, fast = prepared
        if fast and kernel.runs_supported([sp.tid for sp in io.ins], io.out_tids):
            pending = kernel.submit_runs({sp.tid: a for sp, a in zip(io.ins, ins, strict=True)},
                                         {sp.tid: a for sp, a in zip(io.outs, outs, strict=True)}, runs)
            handle = RunHandle([], kernel, pending, (), slot)
            slot.run = handle
            return RowsHandle([handle], outs)
        return RowsHandle([self.run_async(signature_index, [TensorBuffer._over(a[i]) for a in ins],
                                          [TensorBuffer._over(a[i]) for a in outs]) for i in range(runs)], outs)

    def _prepare(self, slot: _Slot, s: _Signature) -> tuple[_Entry, Any, bool]:
        """A slot's plan of signature ``s`` (allocated once): its entry, the delegate kernel of the
        asynchronous path (or None), and whether that kernel is the GPU executor's (which takes
        preallocated output arrays and input stamps)."""
        from .gpu._runtime import GpuPartitionKernel

        it = slot.interpreter
        entry = it._entry_for(s.subgraph.index)
        it._allocate(entry)
        kernel = _single_kernel(entry)
        return entry, kernel, isinstance(kernel, GpuPartitionKernel)

    def _run_sync(self, it: Interpreter, entry: _Entry, s: _Signature, inputs: list[TensorBuffer],
                  outputs: list[TensorBuffer]) -> RunHandle:
        if self.backend != "cpu" and not self._told_sync:
            self._told_sync = True
            log.warning("CompiledModel on %s: the plan of signature %r is not one %s partition reading only the "
                        "signature's inputs (state variables of a recurrent op count as inputs), so run_async "
                        "runs it before returning (no runs in flight; is_fully_accelerated() is False)",
                        self.backend, s.key, self.backend)
        io = self._io(s)
        for spec, b in zip(io.ins, inputs, strict=True):
            it._set(entry, spec.tid, b._array(spec.dtype, spec.shape))
        it._invoke(entry)
        for tid, b in zip(io.out_tids, outputs, strict=True):
            b._store(np.asarray(it._value(entry, tid)))
        return RunHandle(outputs)

    def _free_slot(self) -> _Slot:
        """A copy of the compiled model with no run in flight: an idle one, a new one (up to
        max_in_flight), or the one whose run is the oldest, after that run ends."""
        for slot in self._slots:
            if slot.run is None:
                return slot
        if len(self._slots) < self.max_in_flight:
            slot = _Slot(self._factory())
            self._slots.append(slot)
            return slot
        slot = min(self._slots, key=lambda sl: sl.run.seq)  # the oldest run in flight
        slot.run.wait()
        return slot

    @staticmethod
    def _check_buffer(b: Any, spec: _TensorSpec, what: str, *, exact: bool) -> None:
        if not isinstance(b, TensorBuffer):
            raise TypeError(f"{what}: expected a TensorBuffer, got {type(b).__name__}")
        b._check()
        t, need = spec.tensor, spec.nbytes
        if exact and (tuple(b._shape) != spec.shape or b.nbytes != need):
            raise _cm_error(3, "Failed to invoke the compiled model\n└ Failed to register input tensor buffer: "
                               f"Cannot auto-resize tensor {t.name}: no dims_signature exists (buffer "
                               f"{b._dtype.name}{list(b._shape)}, tensor {t.dtype}{list(spec.shape)}; "
                               "resize_input_tensor changes the shape the model runs)")
        if not exact and b.nbytes < need:
            raise _cm_error(3, "Failed to invoke the compiled model\n└ Failed to register output tensor buffer: "
                               f"buffer of {b.nbytes} bytes for tensor {t.name} of {need} bytes")


#: delegates by (backend, options): compiled models of one configuration share the delegate, hence the
#: device and its queue, so one model's device-resident output is another's input with a device copy
_DELEGATES: dict[tuple[str, str], Any] = {}


def _shared_delegate(cfg: Any) -> tuple[str, Any]:
    """The first configured backend that loads (``select_delegate``), reusing an earlier model's delegate."""
    from ._load import resolve_backend_order, select_delegate

    def key(name: str) -> tuple[str, str]:
        return name, json.dumps(cfg.backend_options(name), sort_keys=True, default=str)

    first = next(iter(resolve_backend_order(cfg.backends)), "cpu")
    if first != "cpu" and key(first) in _DELEGATES:
        return first, _DELEGATES[key(first)]
    name, delegate = select_delegate(cfg)
    if delegate is not None:
        delegate = _DELEGATES.setdefault(key(name), delegate)
    return name, delegate


def _single_kernel(entry: _Entry) -> Any:
    """The delegate kernel when the entry's plan is that one partition, reading only the subgraph's
    inputs and producing all its outputs (the asynchronous path), else None.  A partition reading
    variable tensors (recurrent state, fed back by the interpreter) does not qualify: the asynchronous
    path does not feed them."""
    steps = entry.plan.steps
    if len(steps) != 1 or steps[0].kind != "delegate" or steps[0].kernel is None:
        return None
    st, sg = steps[0], entry.subgraph
    if not set(st.inputs) <= set(sg.inputs) or not set(sg.outputs) <= set(st.outputs):
        return None
    if not set(sg.outputs) <= st.host_outputs:
        return None
    return st.kernel


def _dtype_name(dtype: str) -> str:
    dt = numpy_dtype(dtype)
    return dt.name if dt is not None else dtype

