"""Expand a TFLite sparse constant into its dense array.

Private to the GPU compiler: :func:`densify` uses the CPU kernels' shared
``litegpu.cpu.sparse.densify_values`` when present and falls back to this
implementation otherwise (both are tested against LiteRT).

TFLite's sparse format describes a tensor of rank ``n`` with ``k`` of its
dimensions split into blocks (``block_map[j]`` is the original dimension of
block dimension ``n + j``).  The ``n + k`` dimensions are stored in
``traversal_order``; each level of the traversal is either DENSE (all
``dense_size`` positions stored) or SPARSE_CSR (``array_segments`` gives, for
each position of the level above, the range of ``array_indices`` holding the
coordinates present).  The values buffer lists the stored elements in
depth-first traversal order.  We expand the traversal level by level with
numpy (no Python loop over elements): each level maps the list of "open"
positions to the list of its children, in order.
"""

from __future__ import annotations

import numpy as np

from .._errors import ModelError
from .._ir import Sparsity

__all__ = ["densify"]


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: Sparsity) -> np.ndarray:
    """The dense array of shape ``shape`` that ``values`` (the stored elements) encodes."""
    try:  # the CPU kernels' implementation, when present
        from ..cpu.sparse import densify_values as shared
    except ImportError:
        shared = None
    if shared is not None:
        return np.asarray(shared(np.asarray(values).reshape(-1), sparsity, tuple(shape)))
    return _densify(np.asarray(values).reshape(-1), tuple(shape), sparsity)


def _densify(values: np.ndarray, shape: tuple[int, ...], sp: Sparsity) -> np.ndarray:
    n = len(shape)
    order = list(sp.traversal_order)
    block_map = list(sp.block_map)
    levels = len(order)
    if len(sp.dim_metadata) != levels or levels != n + len(block_map) or sorted(order) != list(range(levels)):
        raise ModelError(f"inconsistent sparsity parameters for a tensor of shape {shape}")
    block_size = {}
    for level, dim in enumerate(order):
        if dim >= n:
            block_size[dim] = sp.dim_metadata[level].dense_size

    # coords[level] holds, for each open position, its coordinate along traversal dim order[level]
    pos = np.zeros(1, np.int64)  # position index inside the current level
    coords: list[np.ndarray] = []
    for level in range(levels):
        md = sp.dim_metadata[level]
        if md.format == 0:  # DENSE
            size = int(md.dense_size)
            coords = [np.repeat(c, size) for c in coords]
            coords.append(np.tile(np.arange(size, dtype=np.int64), pos.size))
            pos = (np.repeat(pos, size) * size + np.tile(np.arange(size, dtype=np.int64), pos.size))
        else:  # SPARSE_CSR
            seg = np.asarray(md.array_segments, np.int64)
            idx = np.asarray(md.array_indices, np.int64)
            if pos.size and (pos.max() + 1 >= seg.size):
                raise ModelError("sparse tensor: array_segments too short")
            starts, stops = seg[pos], seg[pos + 1]
            counts = stops - starts
            total = int(counts.sum())
            coords = [np.repeat(c, counts) for c in coords]
            # child positions: starts[i] .. stops[i]-1 for every open position i, in order
            offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            pos = np.repeat(starts, counts) + offsets
            if total and pos.max() >= idx.size:
                raise ModelError("sparse tensor: array_indices too short")
            coords.append(idx[pos])
    if pos.size != values.size:
        raise ModelError(f"sparse tensor: {values.size} stored values, the sparsity describes {pos.size}")

    # original coordinate of each stored value: blocked dims combine outer index and in-block index
    full = [None] * levels
    for level, dim in enumerate(order):
        full[dim] = coords[level]
    orig = []
    for d in range(n):
        c = full[d]
        if d in block_map:
            bdim = n + block_map.index(d)
            c = c * block_size[bdim] + full[bdim]
        orig.append(c)
    dense = np.zeros(shape, dtype=values.dtype)
    if values.size:
        dense[tuple(orig)] = values
    return dense
