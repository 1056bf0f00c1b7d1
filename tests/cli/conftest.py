"""Fixtures of the CLI tests (the helpers live in ``_cli_helpers.py``, importable by the tests)."""

from _cli_helpers import (  # noqa: F401 - fixtures are found by name
    add_path,
    example_backend,
    isolated_plugins,
    mlp_path,
    register_backend,
    run_cli,
    standin_kernels,
)
