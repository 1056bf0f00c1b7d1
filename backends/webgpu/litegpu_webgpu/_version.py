"""The version of litegpu-webgpu (read by the backend spec and the delegate alike)."""

VERSION = "0.1.0"
