"""Placeholder so setuptools finds ``litegpu.shaders``; pyproject maps the package to the repo-root shaders/.

In a source checkout (PYTHONPATH=core) the templates are read from shaders/ directly
(``litegpu.gpu.kernels.template_text`` falls back to it).
"""
