"""Shared pytest fixtures, and litegpu's pytest plugin (the ``litegpu_backend`` fixture), which is opt-in."""

from __future__ import annotations

from importlib.metadata import distributions
from pathlib import Path

import pytest

# litegpu's pytest plugin is opt-in (installing litegpu registers nothing with pytest).  An install
# made before it became opt-in still registers it through a pytest11 entry point: loading it a
# second time under its module name would make pytest refuse to start.
_PLUGIN = "litegpu.testing.pytest_plugin"
# Every distribution on the path, as pytest scans them (entry_points() would keep only the first
# litegpu found, e.g. a source tree's egg-info shadowing the installed one).
_REGISTERED = any(ep.group == "pytest11" and ep.value == _PLUGIN for d in distributions() for ep in d.entry_points)
pytest_plugins = [] if _REGISTERED else [_PLUGIN]


@pytest.fixture(scope="session")
def mediapipe_models() -> dict[str, Path]:
    """``{name: path}`` of the 14 MediaPipe 0.10.14 models, fetched once into the user cache.

    Set ``LITEGPU_MEDIAPIPE_WHEEL`` to a local mediapipe wheel to skip the download.
    Skips (with the reason) when the models cannot be fetched, e.g. offline.
    """
    from litegpu.models import ModelFetchError, fetch_mediapipe

    try:
        return fetch_mediapipe()
    except ModelFetchError as e:
        pytest.skip(f"MediaPipe models unavailable: {e}")


@pytest.fixture
def require_kernels(request):
    """``check(model_path, include_custom=True)``: fail the running test, naming the ops, when the
    CPU registry lacks a kernel the model needs."""

    def check(model_path: str | Path, *, include_custom: bool = True) -> list[str]:
        missing = missing_kernels(model_path, include_custom=include_custom)
        if missing:  # every kernel these models need exists now: a missing one is a regression
            pytest.fail("no CPU kernel for " + ", ".join(missing))
        return missing

    return check


from _litegpu_backends import load_backend_delegate, missing_kernels  # noqa: E402,F401
