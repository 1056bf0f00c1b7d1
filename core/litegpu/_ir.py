"""The immutable graph IR that the reader produces and everything else consumes.

A :class:`Model` holds subgraphs; a :class:`Subgraph` holds tensors and
operators in the order the file lists them.  Nothing here refers back to the
flatbuffer: constant data are numpy arrays (read-only views into the model
bytes or its mmap), options are plain dicts, and enums are ints with the
values of the TFLite schema (see ``_schema.py`` for names).

Conventions
-----------
* ``Tensor.dtype`` is a numpy dtype name (``"float32"``, ``"int8"``,
  ``"bool"``, ``"float16"``...) or one of the non-numpy names ``"string"``,
  ``"resource"``, ``"variant"``, ``"int4"``, ``"bfloat16"``, ``"complex64"``.
* ``Operator.inputs`` may contain ``-1`` for an omitted optional input.
* ``Operator.options`` maps snake_case names of the schema's option fields
  (``stride_w``, ``fused_activation_function``...) to ints, floats, bools or
  tuples; enums stay ints.  ``Operator.opcode`` is the builtin name
  (``"CONV_2D"``) or ``"CUSTOM"``; :attr:`Operator.name` is the custom code for
  custom ops and the builtin name otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Quantization",
    "DimensionMetadata",
    "Sparsity",
    "Tensor",
    "Operator",
    "Subgraph",
    "SignatureDef",
    "Model",
]



@dataclass(frozen=True)
class Quantization:
    """Affine quantization: ``real = scale * (q - zero_point)``.

    ``scale``/``zero_point`` have one entry (per-tensor) or one per slice along
    ``quantized_dimension`` (per-channel).  ``min``/``max`` are the optional
    float ranges some converters record.

    Blockwise quantization (the schema's ``BlockwiseQuantization`` details, int4 weights of
    FULLY_CONNECTED) has no affine scale: ``block_size`` > 0 and ``block_scales`` holds the
    per-block scales as stored (float16, shape ``(rows, innermost / block_size)``), read from the
    tensor the details name; ``scale``/``zero_point`` are then empty.
    """

    scale: np.ndarray  # float32, shape (n,)
    zero_point: np.ndarray  # int64, shape (n,)
    quantized_dimension: int = 0
    min: np.ndarray | None = None
    max: np.ndarray | None = None
    block_size: int = 0
    block_scales: np.ndarray | None = None
    block_scales_tensor: int = -1  # the scales tensor's index (resolved into block_scales by the reader)

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1


@dataclass(frozen=True)
class DimensionMetadata:
    """One dimension of a sparse tensor (TFLite ``DimensionMetadata``)."""

    format: int  # 0 = DENSE, 1 = SPARSE_CSR
    dense_size: int = 0
    array_segments: np.ndarray | None = None
    array_indices: np.ndarray | None = None


@dataclass(frozen=True)
class Sparsity:
    """TFLite sparsity parameters of a constant tensor."""

    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    dim_metadata: tuple[DimensionMetadata, ...]


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...] | None = None
    buffer: int = 0
    data: np.ndarray | None = None  # constant data (read-only), shaped like ``shape``
    quantization: Quantization | None = None
    sparsity: Sparsity | None = None
    is_variable: bool = False
    has_rank: bool = True

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def is_dynamic(self) -> bool:
        """True when the signature has unknown (-1) dimensions."""
        return self.shape_signature is not None and any(d < 0 for d in self.shape_signature)


@dataclass(frozen=True)
class Operator:
    index: int
    opcode: str  # builtin name, or "CUSTOM"
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    intermediates: tuple[int, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    custom_code: str | None = None
    custom_options: bytes | None = None

    @property
    def name(self) -> str:
        """The name users see: the custom code for custom ops, else the builtin name."""
        return self.custom_code if self.opcode == "CUSTOM" and self.custom_code else self.opcode

    @property
    def is_custom(self) -> bool:
        return self.opcode == "CUSTOM"

    @property
    def label(self) -> str:
        """``"node #i NAME vN"``: how every error names this node (the interpreter puts ``"subgraph N "`` in
        front where the node is not in the main subgraph, also of a kernel's own message that starts so)."""
        return f"node #{self.index} {self.name} v{self.version}"


@dataclass(frozen=True)
class Subgraph:
    index: int
    name: str
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class SignatureDef:
    key: str
    subgraph_index: int
    inputs: Mapping[str, int]  # signature name -> tensor index in that subgraph
    outputs: Mapping[str, int]


@dataclass(frozen=True)
class Model:
    version: int
    description: str
    subgraphs: tuple[Subgraph, ...]
    signatures: tuple[SignatureDef, ...] = ()
    metadata: Mapping[str, bytes] = field(default_factory=dict)
    source: str | None = None  # file path, when read from a path
    nbytes: int = 0  # size of the model file
    raw: Any = field(default=None, repr=False, compare=False)  # the bytes/mmap read (for fingerprints)

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]
