"""The version of litegpu-vulkan (read by the backend spec and the delegate alike)."""

VERSION = "0.1.0"
