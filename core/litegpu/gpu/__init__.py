"""GPU compilation shared by the GPU backends: kernels (``litegpu.gpu.kernels``) and the compiler core."""
