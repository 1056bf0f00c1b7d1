"""The version of litegpu-opencl (read by the backend spec and the delegate alike)."""

VERSION = "0.1.0"
