"""Integer (quantized) CPU kernels, bit-faithful to LiteRT's reference kernels.

Its modules register int8 / uint8 / int16 kernels, and the dynamic-range (hybrid)
kernels, which chain to the float kernel registered before them for float weights (see
:mod:`.hybrid`).  They are listed, and imported on first use, by :mod:`litegpu.cpu`.
"""
