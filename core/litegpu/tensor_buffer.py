"""``litegpu.tensor_buffer.TensorBuffer``: LiteRT 2.x's tensor buffer, optionally on the device.

As in LiteRT a buffer is typed bytes with a shape: :meth:`TensorBuffer.write` copies an array's
bytes in (any supported dtype, at most the buffer's size), :meth:`TensorBuffer.read` returns
``num_elements`` of them as ``output_dtype``.  litegpu adds where the bytes live:

* host bytes (always valid after a ``write`` or a host read).  A GPU run takes them straight from
  here (each copy of a compiled model uploads a written value once: ``_version`` numbers the values)
  and reads float32 outputs straight into them;
* a device copy (:class:`litegpu.gpu._runtime.DeviceTensor`) left there by a run with
  ``keep_outputs_on_device=True``: another model on the same device takes it as an input with a
  device copy, and ``read`` downloads it once;
* the run that writes it (``_pending``): ``read`` waits for that run only.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

__all__ = ["TensorBuffer"]

_DTYPES = ("float32", "float16", "int32", "int8", "uint8", "bool")

#: one number per host value a buffer ever held (unique across buffers): a GPU kernel that uploaded
#: value N skips the upload while the buffer still holds N (``GpuPartitionKernel.send`` stamps)
_VERSIONS = itertools.count(1)


_SUPPORTED = frozenset(np.dtype(n) for n in _DTYPES)  # (dtype.name is slow on the per-frame path)


def _normalize_dtype(dtype: Any) -> np.dtype:
    """LiteRT's supported dtypes; others raise its ValueError."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ValueError(f"Unsupported dtype: {dtype}") from exc
    if dt not in _SUPPORTED and dt.name not in _DTYPES:  # (a byte-swapped dtype: by name)
        raise ValueError(f"Unsupported dtype: {dtype}")
    return dt


class TensorBuffer:
    """A typed buffer of one tensor (create it with ``CompiledModel.create_input_buffers`` & co.,
    or :meth:`create_from_host_memory`)."""

    def __init__(self, capsule: Any = None, environment: Any = None):
        # LiteRT's constructor wraps a C capsule; litegpu's buffers come from the factories below.
        if capsule is not None:
            raise ValueError("litegpu TensorBuffers are made by CompiledModel.create_input_buffers / "
                             "create_output_buffers or TensorBuffer.create_from_host_memory")
        self._environment = environment
        self._dtype = np.dtype(np.uint8)
        self._shape: tuple[int, ...] = (0,)
        self._host: np.ndarray | None = None
        self._host_valid = False
        self._device: Any = None  # a DeviceTensor
        self._device_valid = False
        self._pending: Any = None  # the RunHandle that writes this buffer
        self._destroyed = False
        self._version = 0  # of the host value (_VERSIONS); 0: none stamped yet
        self._external = False  # over caller-owned memory (create_from_host_memory)
        self._nbytes: tuple[Any, Any, int] | None = None  # (shape, dtype, bytes) of the last nbytes
        self._views: dict[tuple[np.dtype, tuple[int, ...]], np.ndarray] = {}  # typed views of _host, by shape

    @classmethod
    def _create(cls, dtype: np.dtype, shape: tuple[int, ...], environment: Any = None) -> TensorBuffer:
        b = cls(None, environment)
        b._dtype, b._shape = np.dtype(dtype), tuple(int(d) for d in shape)
        b._host = np.zeros(int(np.prod(shape, dtype=np.int64)) * b._dtype.itemsize, np.uint8)
        b._host_valid = True
        return b

    @classmethod
    def create_from_host_memory(cls, data_array: np.ndarray) -> TensorBuffer:
        """A buffer over ``data_array``'s memory (C-contiguous; its dtype and shape)."""
        if not isinstance(data_array, np.ndarray):
            raise ValueError("data_array must be a NumPy array")
        dt = _normalize_dtype(data_array.dtype)
        if not data_array.flags.c_contiguous:
            raise ValueError("data_array must be C-contiguous for zero-copy host-memory binding")
        b = cls(None)
        b._dtype, b._shape = dt, (int(data_array.size),)
        b._host = data_array.reshape(-1).view(np.uint8)
        b._host_valid = True
        b._external = True  # the caller may change the bytes behind our back: never stamped
        return b

    # ------------------------------------------------------------------ LiteRT's API

    @property
    def nbytes(self) -> int:
        n = self._nbytes
        if n is None or n[0] is not self._shape or n[1] is not self._dtype:
            n = self._nbytes = (self._shape, self._dtype, int(np.prod(self._shape, dtype=np.int64)) * self._dtype.itemsize)
        return n[2]

    def write(self, data_array: np.ndarray) -> None:
        """Copy ``data_array``'s bytes into the buffer (from its start)."""
        self._check()
        if not isinstance(data_array, np.ndarray):
            raise ValueError("data_array must be a NumPy array")
        _normalize_dtype(data_array.dtype)
        raw = np.ascontiguousarray(data_array).reshape(-1).view(np.uint8)
        if raw.size > self.nbytes:
            raise RuntimeError("WriteTensorBuffer: source buffer is larger than the tensor buffer")
        self._settle()
        if raw.size < self.nbytes:
            self._ensure_host()  # a partial write keeps the rest
        self._host[:raw.size] = raw
        self._host_valid, self._device_valid = True, False
        self._version = next(_VERSIONS)

    def read(self, num_elements: int, output_dtype: Any) -> np.ndarray:
        """``num_elements`` elements of the buffer as ``output_dtype`` (a new array); waits for the
        run that writes the buffer, if one is in flight."""
        dt = _normalize_dtype(output_dtype)
        result = np.empty(num_elements, dtype=dt)  # LiteRT's error for a negative count
        self._check()
        if result.nbytes > self.nbytes:
            raise RuntimeError("ReadTensorToBuffer: destination buffer is larger than the tensor buffer")
        self._settle()
        self._ensure_host()
        result.view(np.uint8)[:] = self._host[:result.nbytes]
        return result

    def get_tensor_details(self) -> dict[str, Any]:
        self._check()
        return {"dtype": self._dtype.name, "shape": list(self._shape)}

    def destroy(self) -> None:
        """Release the buffer (host and device memory); it cannot be used afterwards."""
        if self._pending is not None:
            self._pending.wait()
        self._host = self._device = self._environment = None
        self._views = {}
        self._host_valid = self._device_valid = False
        self._destroyed = True

    @property
    def capsule(self) -> TensorBuffer:
        """LiteRT's handle for the native buffer; litegpu's buffers are their own handle."""
        self._check()
        return self

    # ------------------------------------------------------------------ litegpu

    @property
    def on_device(self) -> bool:
        """Whether the buffer's current value is on a device (no host copy of it yet)."""
        return self._device_valid and not self._host_valid

    def _check(self) -> None:
        if self._destroyed:
            raise ValueError("TensorBuffer has been destroyed")

    def _settle(self) -> None:
        """Wait for the run that writes this buffer."""
        if self._pending is not None:
            self._pending.wait()

    def _ensure_host(self) -> None:
        if not self._host_valid:
            a = self._device.to_host()
            self._host[:a.nbytes] = a.reshape(-1).view(np.uint8)
            self._host_valid = True
            self._version = next(_VERSIONS)

    def _view(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The host bytes as an array of ``dtype`` and ``shape`` (no copy; cached: the run path
        reads inputs from it and reads outputs into it)."""
        v = self._views.get((dtype, shape))
        if v is None:
            n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            v = self._views[(dtype, shape)] = self._host[:n].view(dtype).reshape(shape)
        return v

    def _lend(self, array: np.ndarray) -> None:
        """Make the buffer's host memory ``array``'s (C-contiguous, exactly the buffer's bytes; the
        caller keeps it alive and unchanged while a run uses it): a run then reads its input from
        there, or writes its output there, with no copy.  ``litegpu batch`` lends each row of a batch
        this way.  Like :meth:`create_from_host_memory`'s buffers it is never stamped as uploaded."""
        self._settle()
        self._host = array.reshape(-1).view(np.uint8)
        self._views = {(array.dtype, array.shape): array}  # the run path's _view of it: no lookup work
        self._host_valid, self._device_valid = True, False
        self._external = True

    @classmethod
    def _over(cls, array: np.ndarray) -> TensorBuffer:
        """A buffer of ``array``'s dtype and shape lent ``array``'s memory (:meth:`_lend`; no host
        memory of its own): ``CompiledModel.run_rows_async`` runs each row this way where it cannot
        submit the rows as one."""
        b = cls(None)
        b._dtype, b._shape = array.dtype, tuple(int(d) for d in array.shape)
        b._lend(array)
        return b

    def _array(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The value as a fresh host array of the tensor's dtype and shape (after its writer ends)."""
        self._settle()
        self._ensure_host()
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self._host[:n].copy().view(dtype).reshape(shape)

    def _store(self, value: Any) -> None:
        """A run's output: a host array (copied into the buffer) or a DeviceTensor (kept)."""
        if isinstance(value, np.ndarray | np.generic):
            raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
            self._host[:raw.size] = raw
            self._host_valid, self._device_valid = True, False
            self._version = next(_VERSIONS)
        else:
            self._device = value
            self._device_valid, self._host_valid = True, False

    def __repr__(self) -> str:
        where = "destroyed" if self._destroyed else ("device" if self.on_device else "host")
        return f"<litegpu TensorBuffer {self._dtype.name}{list(self._shape)} on {where}>"
