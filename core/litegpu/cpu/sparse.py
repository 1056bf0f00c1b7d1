"""Sparse constant tensors: :func:`densify` and the DENSIFY op.

TFLite stores a sparse tensor as its non-zero *values* (in traversal order)
plus a :class:`~litegpu._ir.Sparsity`: a ``traversal_order`` over the
original dimensions followed by the block dimensions, a ``block_map`` (which
original dimension each block dimension splits) and one ``DimensionMetadata``
per traversal level, either DENSE (``dense_size``) or SPARSE_CSR
(``array_segments``/``array_indices``).

Densifying walks the levels breadth-first, with index arrays for all the
paths at once (no Python loop over elements): a dense level multiplies every
path by its size, a CSR level expands path ``p`` into the index range
``segments[p]:segments[p+1]``.  The leaves come out in the same order as the
stored values (the depth-first order TFLite writes them in).
"""

from __future__ import annotations

import numpy as np

from .._errors import ModelError
from .._ir import Sparsity, Tensor
from ._registry import NodeContext, Prepared, register_kernel

__all__ = ["densify", "densify_values"]

_DENSE, _SPARSE_CSR = 0, 1


def _expand_csr(prev: np.ndarray, segments: np.ndarray, indices: np.ndarray):
    """For each path (its CSR position ``prev``): the child positions and which path each came from."""
    n_seg = segments.shape[0]
    ok = prev + 1 < n_seg
    p = np.where(ok, prev, 0)
    starts = np.where(ok, segments[p], 0)
    ends = np.where(ok, segments[np.minimum(p + 1, n_seg - 1)], 0)
    counts = np.maximum(ends - starts, 0)
    owner = np.repeat(np.arange(prev.shape[0]), counts)
    first = np.cumsum(counts) - counts
    pos = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts) + np.repeat(starts, counts)
    keep = pos < indices.shape[0]  # TFLite skips positions past the index array
    return pos[keep], owner[keep]


def densify_values(values: np.ndarray, sparsity: Sparsity, shape) -> np.ndarray:
    """Dense array of ``shape`` from the stored ``values`` of a sparse tensor."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    trav = [int(t) for t in sparsity.traversal_order]
    bmap = [int(b) for b in sparsity.block_map]
    meta = sparsity.dim_metadata
    levels = len(trav)
    if len(meta) != levels or levels != rank + len(bmap) or sorted(trav) != list(range(levels)):
        raise ModelError(f"sparse tensor: traversal order {trav}, block map {bmap} and {len(meta)} "
                         f"dimension metadata do not fit rank {rank}")
    dense_sizes = [int(m.dense_size) for m in meta]
    block_size = []
    for k, d in enumerate(bmap):
        if not 0 <= d < rank:
            raise ModelError(f"sparse tensor: block map entry {d} out of range for rank {rank}")
        block_size.append(dense_sizes[trav[rank + k]])

    prev = np.zeros(1, np.int64)
    level_idx: list[np.ndarray] = []
    for lv, m in enumerate(meta):
        if int(m.format) == _DENSE:
            size = dense_sizes[lv]
            if size < 0:
                raise ModelError(f"sparse tensor: negative dense size at level {lv}")
            n = prev.shape[0]
            level_idx = [np.repeat(a, size) for a in level_idx]
            level_idx.append(np.tile(np.arange(size, dtype=np.int64), n))
            prev = (prev[:, None] * size + np.arange(size, dtype=np.int64)[None, :]).reshape(-1)
        elif int(m.format) == _SPARSE_CSR:
            if m.array_segments is None or m.array_indices is None:
                raise ModelError(f"sparse tensor: CSR level {lv} lacks segments or indices")
            seg = np.asarray(m.array_segments, np.int64).reshape(-1)
            ind = np.asarray(m.array_indices, np.int64).reshape(-1)
            pos, owner = _expand_csr(prev, seg, ind)
            level_idx = [a[owner] for a in level_idx]
            level_idx.append(ind[pos])
            prev = pos
        else:
            raise ModelError(f"sparse tensor: unknown dimension format {m.format} at level {lv}")

    orig = [None] * rank
    for lv in range(rank):
        orig[trav[lv]] = level_idx[lv]
    for lv in range(rank, levels):
        k = trav[lv] - rank
        d = bmap[k]
        orig[d] = orig[d] * block_size[k] + level_idx[lv]
    n_leaves = prev.shape[0]
    flat_vals = np.asarray(values).reshape(-1)
    if flat_vals.shape[0] < n_leaves:
        raise ModelError(f"sparse tensor: {n_leaves} positions but only {flat_vals.shape[0]} stored values")
    flat = np.zeros(n_leaves, np.int64)
    for d in range(rank):
        idx = orig[d]
        if n_leaves and (idx.min() < 0 or idx.max() >= shape[d]):
            raise ModelError(f"sparse tensor: index out of range along dimension {d} (size {shape[d]})")
        flat = flat * shape[d] + idx
    out = np.zeros(int(np.prod(shape, dtype=np.int64)), flat_vals.dtype)
    out[flat] = flat_vals[:n_leaves]
    return out.reshape(shape)


def densify(tensor: Tensor) -> np.ndarray:
    """The dense value of a constant tensor (sparse or not), for the CPU and GPU cores."""
    if tensor.data is None:
        raise ModelError(f"tensor {tensor.name!r} is not constant; only constant tensors can be densified")
    if tensor.sparsity is None:
        return np.asarray(tensor.data).reshape(tensor.shape)
    return densify_values(tensor.data, tensor.sparsity, tensor.shape)


@register_kernel("DENSIFY", versions=range(1, 2))
def densify_op(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.invalid("needs one input and one output")
    t = ctx.inputs[0]
    if t.data is None:
        raise ctx.invalid(f"input {t.name!r} must be a constant tensor")
    shape = tuple(int(d) for d in t.shape) if t.shape is not None else None
    sparsity = getattr(t, "sparsity", None)
    if sparsity is not None:
        dense = densify_values(t.data, sparsity, shape)
    else:
        data = np.asarray(t.data)
        if shape is None or data.size != int(np.prod(shape, dtype=np.int64)):
            raise ctx.invalid(f"input {t.name!r} has no sparsity parameters and "
                              f"{data.size} values for shape {shape}")
        dense = data.reshape(shape)  # already dense (e.g. densified by the reader)
    dense = np.array(dense, dtype=np.dtype(ctx.outputs[0].dtype) if ctx.outputs[0].dtype != "string" else None)
    dense.flags.writeable = False
    return Prepared([tuple(dense.shape)], lambda inputs: [dense])
