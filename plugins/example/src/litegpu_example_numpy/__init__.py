"""litegpu-example-numpy: a complete, small litegpu backend (name ``example``).

It runs float32 elementwise ops with numpy on a pretend device: tensors that
stay inside the backend between two of its partitions are kept in
:class:`DeviceArray` wrappers instead of being handed back to the host, which
is how a real GPU backend avoids copies.  Everything else is declined with a
reason.  Read ``backend.py`` top to bottom as a worked example of the
delegate protocol.
"""

from .backend import DeviceArray, ExampleBackend, ExampleDelegate, ExampleKernel

__version__ = "0.1.0"

__all__ = ["ExampleBackend", "ExampleDelegate", "ExampleKernel", "DeviceArray", "__version__"]
