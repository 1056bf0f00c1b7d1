"""NON_MAX_SUPPRESSION_V4/V5 vs LiteRT's builtin kernels: the same selected indices (ties included:
scores on a coarse grid) and scores, padded to max_output_size, with max_output_size constant or not."""

from __future__ import annotations

import numpy as np
import pytest
from opcheck import Const, check


def _boxes(n: int, r: np.random.Generator) -> np.ndarray:
    c, s = r.uniform(0, 10, (n, 2)), r.uniform(0.5, 4, (n, 2))
    b = np.concatenate([c - s / 2, c + s / 2], 1).astype(np.float32)
    flip = r.random(n) < 0.3  # corners in either order
    b[flip] = b[flip][:, [2, 3, 0, 1]]
    b[0] = b[1]  # a duplicate box
    return b


@pytest.mark.parametrize("n, max_out, ties", [(6, 3, False), (20, 10, True), (40, 50, False), (30, 30, True)])
def test_non_max_suppression(n, max_out, ties):
    r = np.random.default_rng(n)
    b = _boxes(n, r)
    s = r.uniform(0, 1, n)
    s = (np.round(s * 4) / 4 if ties else s).astype(np.float32)
    f = [Const(np.array(v, np.float32)) for v in (0.4, 0.2, 0.5, 0.1)]
    for m in (Const(np.array(max_out, np.int32)), np.array(max_out, np.int32)):
        check("NON_MAX_SUPPRESSION_V4", [b, s, m, f[0], f[1]], ["int32", "int32"], reference=False)
        for sigma in (0.0, 0.5, 1.0):
            check("NON_MAX_SUPPRESSION_V5", [b, s, m, f[2], f[3], Const(np.array(sigma, np.float32))],
                  ["int32", "float32", "int32"], reference=False)
