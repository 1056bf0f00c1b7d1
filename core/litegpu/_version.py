"""The version of the ``litegpu`` distribution (its own module so the plugin loader can read it
without importing the package it belongs to)."""

__version__ = "0.1.0"
