"""litegpu-mybackend: a litegpu backend (template: rename and fill in the TODOs)."""

from .backend import MyBackend, MyDelegate

__version__ = "0.1.0"
__all__ = ["MyBackend", "MyDelegate", "__version__"]
