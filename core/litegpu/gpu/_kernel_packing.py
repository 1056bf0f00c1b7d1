"""Host-side layouts the kernels expect: PHWC4 tensors and pre-laid-out weights (numpy, done once at prepare).

Every function is vectorized numpy; shapes follow TFLite (filters OHWI, FC weights [out, in]).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dialects._lang import KernelTemplateError

__all__ = [
    "slices",
    "to_phwc4",
    "from_phwc4",
    "pack_channels",
    "pack_conv2d_weights",
    "pack_depthwise_weights",
    "pack_transpose_conv_weights",
    "pack_fc_weights",
]


def slices(c: int) -> int:
    """Number of 4-channel slices holding ``c`` channels."""
    return (int(c) + 3) // 4


def _bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) > 4:
        raise KernelTemplateError(f"PHWC4 holds tensors of rank <= 4, not {shape}")
    s = (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)
    return s  # type: ignore[return-value]


def to_phwc4(x: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """A BHWC tensor (rank <= 4, leading dims 1) as a PHWC4 array of shape (B*S*H*W, 4), zero padded."""
    b, h, w, c = _bhwc(x.shape)
    s = slices(c)
    padded = np.zeros((b, h, w, s * 4), dtype=dtype)
    padded[..., :c] = x.reshape(b, h, w, c)
    return np.ascontiguousarray(padded.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4).reshape(-1, 4))


def from_phwc4(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The BHWC tensor of ``shape`` stored in a PHWC4 buffer (any flat or (N, 4) array)."""
    b, h, w, c = _bhwc(shape)
    s = slices(c)
    a = np.asarray(buf).reshape(-1)[: b * s * h * w * 4].reshape(b, s, h, w, 4)
    return a.transpose(0, 2, 3, 1, 4).reshape(b, h, w, s * 4)[..., :c].reshape(shape)


def pack_channels(v: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """A per-channel vector (bias, PRELU alpha) as one vec4 per slice: shape (S, 4)."""
    v = np.asarray(v).reshape(-1)
    out = np.zeros((slices(v.size), 4), dtype=dtype)
    out.reshape(-1)[: v.size] = v
    return out


def _pack_oc_ic(w: np.ndarray, dtype: Any) -> np.ndarray:
    """[O, KH, KW, I] -> (S_out, KH, KW, S_in, 4 (j = input lane), 4 (k = output lane)) flattened to (N, 4)."""
    o, kh, kw, i = w.shape
    so, si = slices(o), slices(i)
    p = np.zeros((so * 4, kh, kw, si * 4), dtype=np.float32)
    p[:o, :, :, :i] = w
    # [os, k, ky, kx, is, j] -> [os, ky, kx, is, j, k]
    p = p.reshape(so, 4, kh, kw, si, 4).transpose(0, 2, 3, 4, 5, 1)
    return np.ascontiguousarray(p.reshape(-1, 4).astype(dtype))


def pack_conv2d_weights(w: np.ndarray, groups: int = 1, dtype: Any = np.float32) -> tuple[np.ndarray, dict[str, Any]]:
    """TFLite CONV_2D filter [O, KH, KW, I/groups] -> (packed (N, 4), info).

    ``info`` has the kernel option ``grouped`` and the params ``SRC_SG`` / ``DST_SG`` that the
    caller must pass (with the input/output slice counts).  Groups whose channel counts are not
    multiples of 4 are expanded to a dense (block-diagonal) filter, so ``grouped`` is False then.
    """
    w = np.asarray(w, dtype=np.float32)
    o, kh, kw, ig = w.shape
    if groups < 1 or o % groups:
        raise KernelTemplateError(f"conv2d: {o} output channels do not split into {groups} groups")
    og = o // groups
    if groups > 1 and ig % 4 == 0 and og % 4 == 0:
        return _pack_oc_ic(w, dtype), {"grouped": True, "SRC_SG": ig // 4, "DST_SG": og // 4}
    if groups > 1:  # dense block-diagonal expansion
        dense = np.zeros((o, kh, kw, ig * groups), dtype=np.float32)
        for g in range(groups):  # loop over groups (a handful), not elements
            dense[g * og:(g + 1) * og, :, :, g * ig:(g + 1) * ig] = w[g * og:(g + 1) * og]
        w = dense
    return _pack_oc_ic(w, dtype), {"grouped": False, "SRC_SG": slices(w.shape[3]), "DST_SG": slices(o)}


def pack_transpose_conv_weights(w: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """TFLite TRANSPOSE_CONV / Convolution2DTransposeBias filter [O, KH, KW, I] -> packed (N, 4)."""
    return _pack_oc_ic(np.asarray(w, dtype=np.float32), dtype)


def pack_depthwise_weights(w: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """TFLite DEPTHWISE_CONV_2D filter [1, KH, KW, C_out] -> (S * KH * KW, 4): vec4 (s * KH + ky) * KW + kx."""
    w = np.asarray(w, dtype=np.float32)
    _, kh, kw, c = w.shape
    s = slices(c)
    p = np.zeros((kh, kw, s * 4), dtype=np.float32)
    p[..., :c] = w[0]
    return np.ascontiguousarray(p.reshape(kh, kw, s, 4).transpose(2, 0, 1, 3).reshape(-1, 4).astype(dtype))


def pack_fc_weights(w: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """TFLite FULLY_CONNECTED weights [C_out, K] -> packed (N, 4): vec4 (os * SRC_S + is) * 4 + j."""
    w = np.asarray(w, dtype=np.float32)
    return _pack_oc_ic(w.reshape(w.shape[0], 1, 1, w.shape[1]), dtype)
