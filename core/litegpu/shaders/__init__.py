"""Kernel templates (``*.lgk``), installed as the ``litegpu.shaders`` package; see docs/gpu-kernels.md."""
