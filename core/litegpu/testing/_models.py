"""Small generated models for tests and benchmarks that need a whole image model, not one op."""

from __future__ import annotations

import numpy as np

from ._builder import ModelBuilder

__all__ = ["small_image_classifier"]


def small_image_classifier(hw: int = 16, channels: int = 8, classes: int = 4, seed: int = 7) -> bytes:
    """An ``hw`` x ``hw`` RGB float32 classifier: CONV_2D 3x3 (relu) -> AVERAGE_POOL_2D (global) ->
    RESHAPE -> FULLY_CONNECTED -> SOFTMAX.  Outputs: ``probs`` [1, classes] and the convolution's
    ``conv`` [1, hw, hw, channels].  Every op runs on the GPU backends, so one model exercises the
    CPU interpreter and each delegate in ``litegpu batch`` tests and benchmarks."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("image", (1, hw, hw, 3), "float32")
    c = b.tensor("conv", (1, hw, hw, channels), "float32")
    b.op("CONV_2D", [x, b.const("w", rng.normal(0, 0.3, (channels, 3, 3, 3)).astype(np.float32)),
                     b.const("b", rng.normal(0, 0.1, channels).astype(np.float32))], [c],
         padding=0, stride_w=1, stride_h=1, fused_activation_function=1)  # padding 0: SAME; 1: relu
    p = b.tensor("pool", (1, 1, 1, channels), "float32")
    b.op("AVERAGE_POOL_2D", [c], [p], padding=1, stride_w=hw, stride_h=hw, filter_width=hw, filter_height=hw)
    flat = b.tensor("flat", (1, channels), "float32")
    b.op("RESHAPE", [p, b.const("shape", np.array([1, channels], np.int32))], [flat], new_shape=[1, channels])
    logits = b.tensor("logits", (1, classes), "float32")
    b.op("FULLY_CONNECTED", [flat, b.const("fw", rng.normal(0, 0.5, (classes, channels)).astype(np.float32)),
                             b.const("fb", np.zeros(classes, np.float32))], [logits])
    probs = b.tensor("probs", (1, classes), "float32")
    b.op("SOFTMAX", [logits], [probs], beta=1.0)
    b.output(probs, c)
    return b.build()
