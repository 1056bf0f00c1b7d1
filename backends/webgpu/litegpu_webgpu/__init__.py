"""litegpu-webgpu: the WebGPU backend of litegpu (wgpu-py on Vulkan, Metal, D3D12 or Mesa lavapipe).

Importing this package does not import wgpu; the device module loads it on first use.
"""

from ._backend import WebGPUBackend, WebGPUDelegate

__version__ = "0.1.0"

__all__ = ["WebGPUBackend", "WebGPUDelegate", "WebGPUDevice", "list_adapters", "__version__"]


def __getattr__(name: str):  # lazy: keep `import litegpu_webgpu` free of wgpu
    if name in ("WebGPUDevice", "list_adapters"):
        from . import _device

        return getattr(_device, name)
    raise AttributeError(name)
