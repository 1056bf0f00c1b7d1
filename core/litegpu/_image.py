"""Image resampling shared by the command line's preprocessing and :mod:`litegpu.mediapipe`
(numpy only, so neither needs an imaging library to resize)."""

from __future__ import annotations

import numpy as np

__all__ = ["resize"]


def resize(img: np.ndarray, height: int, width: int, method: str = "bilinear") -> np.ndarray:
    """Resize HxWxC to ``height`` x ``width`` (half-pixel centres); float32 result unless unchanged."""
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    src = img.astype(np.float32)
    if method == "nearest":
        ys = np.minimum((np.arange(height) + 0.5) * h / height, h - 1).astype(np.int64)
        xs = np.minimum((np.arange(width) + 0.5) * w / width, w - 1).astype(np.int64)
        return src[ys][:, xs]
    fy = np.clip((np.arange(height) + 0.5) * h / height - 0.5, 0, h - 1)
    fx = np.clip((np.arange(width) + 0.5) * w / width - 0.5, 0, w - 1)
    y0 = np.floor(fy).astype(np.int64)
    x0 = np.floor(fx).astype(np.int64)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    wy = (fy - y0)[:, None, None]
    wx = (fx - x0)[None, :, None]
    top = src[y0][:, x0] * (1 - wx) + src[y0][:, x1] * wx
    bot = src[y1][:, x0] * (1 - wx) + src[y1][:, x1] * wx
    return top * (1 - wy) + bot * wy
