"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A delegate failing at prepare or invoke falls back to the CPU by default (issue 19); in the test
# suite it must fail loudly, or a GPU kernel bug would pass as the CPU's correct answer.  Tests of the
# fallback itself ask for it explicitly.
os.environ.setdefault("LITEGPU_ON_DEVICE_ERROR", "raise")


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
