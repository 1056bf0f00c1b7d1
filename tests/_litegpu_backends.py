"""Shared test helper: a backend's delegate, or a skip naming why it cannot run here.

A plain module (not conftest.py): several conftest.py files exist under tests/, and ``from conftest
import ...`` would pick whichever pytest imported last.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def load_backend_delegate(name: str, options: dict | None = None):
    """A delegate of backend ``name`` or ``pytest.skip`` with the reason it cannot run here.

    Installed backends are found through their entry points (the way users get them); in a source
    checkout without ``make install`` the backend's package folder (``backends/NAME``) is tried next.
    """
    import importlib
    import sys

    import litegpu
    from litegpu import BackendUnavailableError, UnknownBackendError

    try:
        return litegpu.load_delegate(name, options)
    except UnknownBackendError:
        pass
    except BackendUnavailableError as e:
        pytest.skip(f"backend {name} unavailable: {e}")
    folder = Path(__file__).resolve().parents[1] / "backends" / name
    if not folder.is_dir():
        pytest.skip(f"backend {name} is not installed")
    sys.path.insert(0, str(folder))
    try:
        mod = importlib.import_module(f"litegpu_{name}")
    except ImportError as e:
        pytest.skip(f"backend {name} cannot be imported: {e}")
    spec = next(v for k, v in vars(mod).items() if k.endswith("Backend") and isinstance(v, type))()
    ok, why = spec.availability()
    if not ok:
        pytest.skip(f"backend {name} unavailable: {why}")
    return spec.create_delegate(dict(options or {}))
