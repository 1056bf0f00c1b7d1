"""Packaged litegpu configurations (YAML).

In a source checkout this directory is a stand-in: the YAML files live in the
repository's top-level ``configs/`` folder, which ``pyproject.toml`` maps to
the package ``litegpu.configs`` when building (``package-dir``), and which
``litegpu._config`` reads directly when running from the checkout.
"""
