"""Packaged litegpu configurations (YAML).  Load them with ``litegpu.load(model, config="low-latency")``."""
